package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// fenceNode keeps new claims off every device of the node while a node step moves the node's
// other holders and the node reboots: one DeviceTaintRule (NoSchedule, key kubeobj.TaintNodeRepair)
// per driver and pool the node publishes. Running Pods stay until their migration moves them. A
// fence already there (another device's step of the node) is left as it is.
func (v nodeSteps) fenceNode(ctx context.Context, in NodeInput) (int, error) {
	a := v.a
	slices, err := a.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + in.Node})
	if err != nil {
		return 0, fmt.Errorf("list the resource slices of node %s: %w", in.Node, err)
	}
	seen := map[string]bool{}
	for _, s := range slices.Items {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != in.Node || s.Spec.Driver == "" || s.Spec.Pool.Name == "" {
			continue
		}
		driver, pool := s.Spec.Driver, s.Spec.Pool.Name
		name := fenceName(in.Node, driver, pool)
		if seen[name] {
			continue
		}
		seen[name] = true
		labels := map[string]string{kubeobj.LabelDriver: kubeobj.LabelValue(driver), kubeobj.LabelPool: kubeobj.LabelValue(pool)}
		ann := map[string]string{kubeobj.AnnotationWorkflow: in.WorkflowID, kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationActor: "devicewarden",
			kubeobj.AnnotationReason: fmt.Sprintf("node %s is rebooted to repair %s: its device holders are moved first, and new claims wait", in.Node, in.Device)}
		kubeobj.NodeLabels(labels, ann, in.Node)
		rule := &resourcev1.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
			Spec: resourcev1.DeviceTaintRuleSpec{
				// Driver and pool always: an empty selector would select every device of the cluster.
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(driver), Pool: ptr.To(pool)},
				Taint:          resourcev1.DeviceTaint{Key: kubeobj.TaintNodeRepair, Value: "true", Effect: a.effect(resourcev1.DeviceTaintEffectNoSchedule)},
			},
		}
		if _, err := a.Kube.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("fence node %s (%s/%s): %w", in.Node, driver, pool, err)
		}
	}
	return len(seen), nil
}

// unfenceNode deletes the node's fences: every one once a node step ended (the reboot is over),
// or only workflowID's when its quarantine ended while its step was still moving holders.
func (v nodeSteps) unfenceNode(ctx context.Context, node, workflowID string) error {
	a := v.a
	rules := a.Kube.ResourceV1().DeviceTaintRules()
	list, err := rules.List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(node)})
	if err != nil {
		return fmt.Errorf("list the fences of node %s: %w", node, err)
	}
	for _, r := range list.Items {
		if r.Spec.Taint.Key != kubeobj.TaintNodeRepair || !kubeobj.OnNode(r.Labels, r.Annotations, node) ||
			workflowID != "" && r.Annotations[kubeobj.AnnotationWorkflow] != workflowID {
			continue
		}
		if err := rules.Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("unfence node %s: delete %s: %w", node, r.Name, err)
		}
	}
	return nil
}

// fenceName is the name of a node's fence of one driver's pool.
func fenceName(node, driver, pool string) string {
	sum := sha256.Sum256([]byte(node + "/" + driver + "/" + pool))
	return "devicewarden-node-" + hex.EncodeToString(sum[:])[:16]
}
