package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// NodeInput asks the device's node's remediator for a reboot: a repair ladder's node step.
type NodeInput struct {
	Device device.ID         `json:"device"`
	Node   string            `json:"node"`
	Step   policy.RepairStep `json:"step"`
	// Try numbers the quarantine's try: a retried activity adopts its own object.
	Try        int    `json:"try"`
	WorkflowID string `json:"workflowID"`
}

// RemediateNode creates the step's object (its template, rendered for the device) and waits until
// the node booted again (status.nodeInfo.bootID changed) and is Ready, or the step's timeout
// passed; the object is deleted either way. It runs nothing while another Pod on the node holds a
// device (unless the step leaves that to the remediator), while someone else's object of the same
// name stands (a remediation already under way), or while no API serves the template's kind: the
// device then waits (Busy) rather than being called broken for want of a remediator.
func (a *Activities) RemediateNode(ctx context.Context, in NodeInput) (decide.StepResult, error) {
	step := string(policy.RepairNode)
	fail := func(format string, args ...any) (decide.StepResult, error) {
		a.countTry(step, "failed")
		return decide.StepResult{Reason: fmt.Sprintf(format, args...), At: time.Now()}, nil
	}
	busy := func(format string, args ...any) (decide.StepResult, error) {
		a.countTry(step, "busy")
		return decide.StepResult{Busy: true, Reason: fmt.Sprintf(format, args...), At: time.Now()}, nil
	}
	if in.Node == "" {
		return fail("device %s names no node: there is nothing to reboot", in.Device)
	}
	obj, err := in.Step.Object(policy.NodeVars{Node: in.Node, Device: in.Device.Device, Driver: in.Device.Driver, Pool: in.Device.Pool})
	if err != nil {
		return fail("node step: %v", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	objs, what, err := a.remediatorObjects(u)
	if err != nil {
		return busy("%v", err)
	}
	if u.GetName() == "" {
		sum := sha256.Sum256([]byte(in.WorkflowID + "/" + strconv.Itoa(in.Try)))
		u.SetGenerateName("")
		u.SetName("devicewarden-reboot-" + hex.EncodeToString(sum[:])[:16])
	}
	what += " " + u.GetName()
	created, before := time.Now(), ""
	cur, err := objs.Get(ctx, u.GetName(), metav1.GetOptions{})
	switch {
	case err == nil:
		ann := cur.GetAnnotations()
		if ann[kubeobj.AnnotationWorkflow] != in.WorkflowID || ann[kubeobj.AnnotationRepairTry] != strconv.Itoa(in.Try) {
			return busy("%s already stands and is not this try's: a remediation of node %s is under way", what, in.Node)
		}
		created, before = cur.GetCreationTimestamp().Time, ann[kubeobj.AnnotationBootID]
	case apierrors.IsNotFound(err):
		if in.Step.Holders != policy.HoldersRemediator {
			held, err := a.nodeHolders(ctx, in.Node)
			if err != nil {
				return decide.StepResult{}, err
			}
			if held != "" {
				return busy("node %s still runs %s; a reboot would end it", in.Node, held)
			}
		}
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if err != nil {
			return decide.StepResult{}, fmt.Errorf("get node %s: %w", in.Node, err)
		}
		if before = node.Status.NodeInfo.BootID; before == "" {
			return fail("node %s reports no boot ID: its reboot could not be told", in.Node)
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[kubeobj.AnnotationWorkflow], ann[kubeobj.AnnotationRepairTry] = in.WorkflowID, strconv.Itoa(in.Try)
		ann[kubeobj.AnnotationDevice], ann[kubeobj.AnnotationBootID] = in.Device.String(), before
		u.SetAnnotations(ann)
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[kubeobj.LabelManagedBy] = kubeobj.ManagedBy
		u.SetLabels(labels)
		if _, err := objs.Create(ctx, u, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
			return decide.StepResult{}, fmt.Errorf("create %s: %w", what, err) // AlreadyExists: the retry adopts or waits
		}
	default:
		return decide.StepResult{}, fmt.Errorf("get %s: %w", what, err)
	}
	if before == "" {
		return fail("%s records no boot ID of node %s: its reboot could not be told", what, in.Node)
	}
	done := func() { _ = objs.Delete(context.WithoutCancel(ctx), u.GetName(), metav1.DeleteOptions{}) }
	deadline := created.Add(in.Step.Check.Timeout.D())
	poll := a.CheckPoll
	if poll <= 0 {
		poll = 5 * time.Second
	}
	for {
		activity.RecordHeartbeat(ctx, what)
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			return decide.StepResult{}, fmt.Errorf("get node %s: %w", in.Node, err)
		}
		now, after := time.Now(), ""
		if node != nil {
			after = node.Status.NodeInfo.BootID
		}
		if node != nil && after != "" && after != before && nodeReady(node) {
			done()
			a.countTry(step, "passed")
			res := decide.StepResult{Passed: true, Reason: fmt.Sprintf("node %s booted again (boot ID %s, was %s) and is Ready, %s after %s was created",
				in.Node, short(after), short(before), now.Sub(created).Round(time.Second), what), At: now}
			a.tryEvent(ctx, in.Node, step, in.Device, in.WorkflowID, in.Try, res)
			return res, nil
		}
		if !now.Before(deadline) {
			done()
			res, err := fail("node %s did not boot again and turn Ready within %s of %s (boot ID %s, was %s)", in.Node,
				in.Step.Check.Timeout.D(), what, short(after), short(before))
			a.tryEvent(ctx, in.Node, step, in.Device, in.WorkflowID, in.Try, res)
			return res, err
		}
		select {
		case <-ctx.Done():
			return decide.StepResult{}, ctx.Err() // the retry adopts the object and waits on
		case <-time.After(min(poll, time.Until(deadline))):
		}
	}
}

// remediatorObjects is the client of the template's kind, and how to name it in a reason. No API
// serving that kind is an error that names it.
func (a *Activities) remediatorObjects(u *unstructured.Unstructured) (dynamic.ResourceInterface, string, error) {
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		return nil, "", fmt.Errorf("node step: template apiVersion %q: %w", u.GetAPIVersion(), err)
	}
	what := u.GetKind()
	list, err := a.Kube.Discovery().ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return nil, "", fmt.Errorf("no API serves %s %s (is the node's remediator installed?): %w", gv, what, err)
	}
	for _, r := range list.APIResources {
		if r.Kind != u.GetKind() || strings.Contains(r.Name, "/") {
			continue
		}
		objs, err := a.objects()
		if err != nil {
			return nil, "", err
		}
		res := objs.Resource(gv.WithResource(r.Name))
		if !r.Namespaced {
			return res, what, nil
		}
		if u.GetNamespace() == "" {
			u.SetNamespace(kubeobj.Own(a.OwnNamespace))
		}
		return res.Namespace(u.GetNamespace()), what + " " + u.GetNamespace() + "/", nil
	}
	return nil, "", fmt.Errorf("no API serves %s %s (is the node's remediator installed?)", gv, what)
}

// objects is the client for remediators' objects: Objects, or one on the clientset's connection.
func (a *Activities) objects() (dynamic.Interface, error) {
	if a.Objects != nil {
		return a.Objects, nil
	}
	return kubeobj.Dynamic(a.Kube)
}

// nodeHolders names the Pods on the node that hold a device ("" when none does), other than
// DeviceWarden's own checks: a reboot would end them.
func (a *Activities) nodeHolders(ctx context.Context, node string) (string, error) {
	pods, err := a.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", fmt.Errorf("list pods on node %s: %w", node, err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed ||
			p.Labels[kubeobj.LabelCheck] != "" || !holdsDevice(&p) {
			continue
		}
		names = append(names, p.Namespace+"/"+p.Name)
	}
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return "Pod " + names[0] + ", which holds a device", nil
	}
	return fmt.Sprintf("%d Pods that hold devices (%s, ...)", len(names), names[0]), nil
}

// holdsDevice says whether a Pod has a resource claim or a device plugin's resource.
func holdsDevice(p *corev1.Pod) bool {
	if len(p.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, c := range p.Spec.Containers {
		for name := range c.Resources.Limits {
			if n := string(name); strings.Contains(n, "/") && !strings.HasPrefix(n, "kubernetes.io/") && !strings.HasPrefix(n, "hugepages-") {
				return true
			}
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// short is a boot ID's first eight characters, enough to tell two apart in a reason.
func short(id string) string {
	if id == "" {
		return "(none)"
	}
	return id[:min(8, len(id))]
}
