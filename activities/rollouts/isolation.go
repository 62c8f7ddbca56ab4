package rollouts

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// IsolationInput says what the shares of a phase's classes are: soft (a person let tenants in
// although the driver was not proven to enforce them) or proven.
type IsolationInput struct {
	Classes []string `json:"classes"`
	Soft    bool     `json:"soft"`
	// Note is the annotation's text when Soft.
	Note string `json:"note,omitempty"`
}

// MarkClassIsolation labels the classes soft quota, no QoS (with a note saying why), or, after a
// proof passed, takes the label and note off. It is idempotent.
func (a *Activities) MarkClassIsolation(ctx context.Context, in IsolationInput) (err error) {
	defer func() { err = permanent(err) }()
	var label, note any
	if in.Soft {
		label, note = kubeobj.IsolationSoftQuota, in.Note
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{kubeobj.LabelIsolation: label},
		"annotations": map[string]any{kubeobj.AnnotationIsolation: note},
	}})
	for _, c := range in.Classes {
		if _, err := a.Kube.ResourceV1().DeviceClasses().Patch(ctx, c, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kubeobj.FieldManager}); err != nil {
			return fmt.Errorf("mark device class %s: %w", c, err)
		}
	}
	return nil
}
