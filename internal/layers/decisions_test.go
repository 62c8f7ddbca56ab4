package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// decisions are the packages that decide, besides internal/decide (which no caller imports at
// all): a caller may name their plain value types (a breaker's State, a migration's state, a
// rollout's command, a node's failure) to read what a workflow answers, never run a decision.
var decisions = []string{"internal/breaker", "internal/migrationplan", "internal/escalation", "internal/rolloutplan"}

// beyondValues are the functions of the decision packages a caller may call, and why: none of
// them decides anything for a device, a node or a rollout.
var beyondValues = map[string]string{
	"breaker.DefaultConfig":         "the defaults a flag starts from",
	"breaker.DefaultNodePoolLabels": "the defaults a flag starts from",
	"breaker.NodePool":              "a node's pool, named as the breaker names it, for the fleet page's grouping",
	"rolloutplan.LoadFile":          "reading and checking a plan file",
	"rolloutplan.Evaluate":          "the rollout benchmark times the gate evaluation the activity runs",
}

// TestCallersUseOnlyTheDecisionsValues: what a caller (and api) takes from a decision package is
// a type or a constant, or one of beyondValues, never a decision: the deciding stays in the
// workflows.
func TestCallersUseOnlyTheDecisionsValues(t *testing.T) {
	root := moduleRoot(t)
	values := map[string]map[string]bool{} // decision package -> its exported types and constants
	for _, d := range decisions {
		values[d] = exportedValues(t, filepath.Join(root, d))
	}
	used := 0
	for _, c := range append(slices.Clone(callers), "api") {
		for name, f := range sourceFiles(t, filepath.Join(root, c)) {
			local := map[string]string{} // the file's name for a decision package -> the package
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, d := range decisions {
					if path == module+d {
						n := filepath.Base(d)
						if imp.Name != nil {
							n = imp.Name.Name
						}
						local[n] = d
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok || local[x.Name] == "" {
					return true
				}
				used++
				if d := local[x.Name]; !values[d][sel.Sel.Name] && beyondValues[filepath.Base(d)+"."+sel.Sel.Name] == "" {
					t.Errorf("%s uses %s.%s of %s: a caller takes a decision package's types and constants, never a function or variable",
						filepath.Join(c, filepath.Base(name)), x.Name, sel.Sel.Name, d)
				}
				return true
			})
		}
	}
	if used == 0 {
		t.Fatal("no caller names a decision package: the test reads nothing")
	}
}

// exportedValues lists a package's exported type and constant names.
func exportedValues(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range sourceFiles(t, dir) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.TYPE && g.Tok != token.CONST) {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = s.Name.IsExported()
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = n.IsExported()
					}
				}
			}
		}
	}
	return out
}

// sourceFiles parses a package's files, less its tests, by file name.
func sourceFiles(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("%s's files: %v", dir, err)
	}
	out := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = f
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
