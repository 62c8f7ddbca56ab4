package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
)

// NodeVars are what a node step's template may name: the node to reboot and the device it is for.
type NodeVars struct {
	Node, Device, Driver, Pool string
}

// templateJSON keeps a template from the policy file as JSON ("" when it cannot be: validate
// then says a template is missing).
func templateJSON(obj map[string]any) string {
	raw, err := json.Marshal(obj)
	if err != nil {
		return ""
	}
	return string(raw)
}

// Object is the node step's object for v: the template with every string rendered. It must
// name an apiVersion and a kind.
func (s RepairStep) Object(v NodeVars) (map[string]any, error) {
	if s.Template == "" {
		return nil, fmt.Errorf("a %s step needs a template: the object that asks the node's remediator for a reboot", s.Kind)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s.Template), &obj); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	out, err := render(obj, v)
	if err != nil {
		return nil, err
	}
	m := out.(map[string]any)
	for _, f := range []string{"apiVersion", "kind"} {
		if s, ok := m[f].(string); !ok || s == "" {
			return nil, fmt.Errorf("template: the object needs %s", f)
		}
	}
	if md, ok := m["metadata"]; ok {
		if _, ok := md.(map[string]any); !ok {
			return nil, fmt.Errorf("template: metadata must be an object")
		}
	}
	return m, nil
}

// render executes every string of x as a template of v.
func render(x any, v NodeVars) (any, error) {
	switch t := x.(type) {
	case string:
		if !strings.Contains(t, "{{") {
			return t, nil
		}
		tpl, err := template.New("field").Option("missingkey=error").Parse(t)
		if err != nil {
			return nil, fmt.Errorf("template %q: %w", t, err)
		}
		var b strings.Builder
		if err := tpl.Execute(&b, v); err != nil {
			return nil, fmt.Errorf("template %q: %w", t, err)
		}
		return b.String(), nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			r, err := render(e, v)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			r, err := render(e, v)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return x, nil
}
