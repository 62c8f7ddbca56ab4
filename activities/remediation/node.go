package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	// Try numbers the quarantine's try, and TryAt is when it began: a retried activity adopts
	// its own object, never an earlier try's (of this quarantine or an earlier one).
	Try        int       `json:"try"`
	TryAt      time.Time `json:"tryAt,omitempty"`
	WorkflowID string    `json:"workflowID"`
	// BootSeen is the node's boot ID an earlier try of this quarantine saw: a node that booted
	// again since (another device's node step, a person) needs no reboot of this step's.
	BootSeen string `json:"bootSeen,omitempty"`
}

// RemediateNode creates the step's object (its template, rendered for the device) and waits until
// the node booted again (status.nodeInfo.bootID changed) and is Ready, or the step's timeout
// passed; the object is deleted either way. It runs nothing while another Pod on the node holds a
// device (unless the step leaves that to the remediator), while someone else's object of the same
// name stands (a remediation already under way), or while no API serves the template's kind: the
// device then waits (Busy) rather than being called broken for want of a remediator. Another
// device's node step on the same node is joined: this one waits for that reboot, and one reboot
// serves both. The node's permit goes back to the breaker once the step ended.
func (a *Activities) RemediateNode(ctx context.Context, in NodeInput) (decide.StepResult, error) {
	res, err := (nodeSteps{a}).remediateNode(ctx, in)
	if err != nil || in.Node == "" {
		return res, err
	}
	if res.Busy && len(res.Holders) > 0 {
		return res, nil // the node's holders are being moved: the node keeps its permit
	}
	if in.Step.Holders != policy.HoldersRemediator && !res.Busy && !res.NotRun {
		// The step ended: the node's devices take claims again (the device's own rule stays).
		// A node check that did not run keeps them off until the try taken again runs it.
		if err := (nodeSteps{a}).unfenceNode(ctx, in.Node, ""); err != nil {
			return decide.StepResult{}, err
		}
	}
	(permitBook{a}).releaseNode(in.Node, in.Device)
	return res, nil
}

// reboot is one node step's wait: for the object named what (its own, or another device's it
// joined) and the node's boot ID before it.
type reboot struct {
	objs     dynamic.ResourceInterface
	name     string
	what     string
	before   string
	created  time.Time
	deadline time.Time
	own      bool
}

func (v nodeSteps) remediateNode(ctx context.Context, in NodeInput) (decide.StepResult, error) {
	a := v.a
	if in.Node == "" {
		return v.stepFailed("device %s names no node: there is nothing to reboot", in.Device)
	}
	obj, err := in.Step.Object(nodeVars(in))
	if err != nil {
		return v.stepFailed("node step: %v", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	objs, what, err := v.remediatorObjects(u)
	if err != nil {
		return v.stepBusy("%v", err)
	}
	if u.GetName() == "" {
		// One name per node: two devices' steps racing to ask for the node's reboot make one
		// object, and the one whose create fails joins the other's.
		sum := sha256.Sum256([]byte(in.Node))
		u.SetGenerateName("")
		u.SetName("devicewarden-reboot-" + hex.EncodeToString(sum[:])[:16])
	}
	r := reboot{objs: objs, name: u.GetName(), what: what + " " + u.GetName(), created: time.Now(), own: true}
	cur, err := objs.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err == nil && cur.GetAnnotations()[kubeobj.AnnotationWorkflow] == in.WorkflowID && !ownTry(cur, in) {
		// An earlier try's object still stands (a finalizer, a delete that failed, a try whose
		// activity failed outright): its boot ID change is not this try's reboot.
		if err := v.dropStale(ctx, objs, cur); err != nil {
			return v.stepBusy("%s of an earlier try still stands (%v); this try asks once it is gone", r.what, err)
		}
		cur, err = nil, apierrors.NewNotFound(schema.GroupResource{}, u.GetName())
	}
	switch {
	case err == nil:
		ann := cur.GetAnnotations()
		// This try's own (one a dead worker or a failed attempt left) is adopted with the boot
		// ID it recorded; another device's of the same node is joined; anyone else's waits.
		if ann[kubeobj.AnnotationWorkflow] != in.WorkflowID {
			if !joinable(cur, in.Node) {
				return v.stepBusy("%s already stands and is not this try's: a remediation of node %s is under way", r.what, in.Node)
			}
			r.own = false // joined: this step waits its own timeout from now
		} else {
			r.created = cur.GetCreationTimestamp().Time
		}
		r.before = ann[kubeobj.AnnotationBootID]
	case apierrors.IsNotFound(err):
		if other, err := v.sibling(ctx, objs, in); err != nil {
			return decide.StepResult{}, err
		} else if other != nil {
			r = reboot{objs: objs, name: other.GetName(), what: what + " " + other.GetName(), created: time.Now(), before: other.GetAnnotations()[kubeobj.AnnotationBootID]}
			break
		}
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if err != nil {
			return decide.StepResult{}, fmt.Errorf("get node %s: %w", in.Node, err)
		}
		if res, ok := v.bootedSince(ctx, in, node); ok {
			return v.afterBoot(ctx, in, res, in.BootSeen)
		}
		if in.Step.Holders != policy.HoldersRemediator {
			held, pods, err := v.nodeHolders(ctx, in.Node)
			if err != nil {
				return decide.StepResult{}, err
			}
			if held != "" && in.Step.Holders == policy.HoldersMove {
				n, err := v.fenceNode(ctx, in)
				if err != nil {
					return decide.StepResult{}, err
				}
				res, _ := v.stepBusy("node %s still runs %s; they are moved first, and new claims keep off its devices (%d fences)", in.Node, held, n)
				res.Holders = pods
				return res, nil
			}
			if held != "" {
				return v.stepBusy("node %s still runs %s; a reboot would end it", in.Node, held)
			}
			if in.Step.Holders == policy.HoldersWait {
				// Fence the node, then look again: a Pod that landed between the first look and
				// the reboot would be ended by it. The fences go when the step ends.
				if _, err := v.fenceNode(ctx, in); err != nil {
					return decide.StepResult{}, err
				}
				if held, _, err = v.nodeHolders(ctx, in.Node); err != nil || held != "" {
					if uerr := v.unfenceNode(ctx, in.Node, in.WorkflowID); uerr != nil || err != nil {
						return decide.StepResult{}, errors.Join(err, uerr)
					}
					return v.stepBusy("node %s runs %s, which came as the node was fenced; a reboot would end it", in.Node, held)
				}
			}
		}
		if r.before = node.Status.NodeInfo.BootID; r.before == "" {
			return v.stepFailed("node %s reports no boot ID: its reboot could not be told", in.Node)
		}
		mark(u, in, r.before)
		if _, err := objs.Create(ctx, u, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil {
			// Another device's step of the node asked first: join it.
			if cur, gerr := objs.Get(ctx, u.GetName(), metav1.GetOptions{}); apierrors.IsAlreadyExists(err) && gerr == nil &&
				joinable(cur, in.Node) && cur.GetAnnotations()[kubeobj.AnnotationWorkflow] != in.WorkflowID {
				r.own, r.before = false, cur.GetAnnotations()[kubeobj.AnnotationBootID]
				break
			}
			return decide.StepResult{}, fmt.Errorf("create %s: %w", r.what, err) // the retry adopts, joins or waits
		}
	default:
		return decide.StepResult{}, fmt.Errorf("get %s: %w", r.what, err)
	}
	if r.before == "" {
		return v.stepFailed("%s records no boot ID of node %s: its reboot could not be told", r.what, in.Node)
	}
	r.deadline = r.created.Add(in.Step.Check.Timeout.D())
	return v.waitReboot(ctx, in, r)
}

// bootedSince passes a node step whose node booted again (and is Ready) since an earlier try of
// the quarantine saw it: that reboot is this step's, and the review after it proves the device.
func (v nodeSteps) bootedSince(ctx context.Context, in NodeInput, node *corev1.Node) (decide.StepResult, bool) {
	a := v.a
	now := node.Status.NodeInfo.BootID
	if in.BootSeen == "" || now == "" || now == in.BootSeen || !nodeReady(node) {
		return decide.StepResult{}, false
	}
	a.countTry(string(policy.RepairNode), "passed")
	res := decide.StepResult{Passed: true, BootID: now, At: time.Now(), Reason: fmt.Sprintf("node %s booted again since this device's last try (boot ID %s, was %s) and is Ready: no reboot asked for",
		in.Node, short(now), short(in.BootSeen))}
	(checkPods{a}).tryEvent(ctx, in.Node, string(policy.RepairNode), in.Device, in.WorkflowID, in.Try, in.TryAt, res)
	return res, true
}

// nodeVars are what a node step's template is rendered with. A physical unit's ID
// ("counters=<set>") is no valid object name: {{ .Device }} is it made one (lowercase letters,
// digits, '-' and '.', at most 63 characters).
func nodeVars(in NodeInput) policy.NodeVars {
	name := in.Device.Device
	if device.IsUnitKey(name) {
		name = objectName(strings.TrimPrefix(name, device.CounterSetsKey))
	}
	return policy.NodeVars{Node: in.Node, Device: name, Driver: in.Device.Driver, Pool: in.Device.Pool}
}

// objectName makes s a valid object name part: lowercase letters, digits, '-' and '.', starting and
// ending with a letter or digit, at most 63 characters.
func objectName(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b[:min(len(b), 63)]), "-.")
}

// mark puts on a node step's object whose try it is, the node's boot ID before it, and its node.
func mark(u *unstructured.Unstructured, in NodeInput, bootID string) {
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[kubeobj.AnnotationWorkflow], ann[kubeobj.AnnotationRepairTry] = in.WorkflowID, strconv.Itoa(in.Try)
	ann[kubeobj.AnnotationDevice], ann[kubeobj.AnnotationBootID] = in.Device.String(), bootID
	if !in.TryAt.IsZero() {
		ann[kubeobj.AnnotationRepairTryAt] = in.TryAt.UTC().Format(time.RFC3339Nano)
	}
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	kubeobj.NodeLabels(labels, ann, in.Node)
	u.SetAnnotations(ann)
	u.SetLabels(labels)
}

// ownTry says whether a standing object of this device's workflow is this try's: the same try,
// begun at the same time (an object written before it named its start is this try's only if it
// was created once the try had begun), and not being deleted.
func ownTry(u *unstructured.Unstructured, in NodeInput) bool {
	ann := u.GetAnnotations()
	if ann[kubeobj.AnnotationRepairTry] != strconv.Itoa(in.Try) || u.GetDeletionTimestamp() != nil {
		return false
	}
	if at, ok := ann[kubeobj.AnnotationRepairTryAt]; ok || !in.TryAt.IsZero() {
		return at == in.TryAt.UTC().Format(time.RFC3339Nano) || !ok && !u.GetCreationTimestamp().Time.Before(in.TryAt.Truncate(time.Second))
	}
	return true
}

// dropStale deletes an earlier try's object of this device's workflow, and says whether it is gone.
func (v nodeSteps) dropStale(ctx context.Context, objs dynamic.ResourceInterface, u *unstructured.Unstructured) error {
	if err := objs.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete: %w", err)
	}
	if _, err := objs.Get(ctx, u.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		if err == nil {
			return fmt.Errorf("being deleted")
		}
		return err
	}
	return nil
}

// joinable says whether a standing object is another device's node step on the same node, with
// the boot ID it waits to see change.
func joinable(u *unstructured.Unstructured, node string) bool {
	return kubeobj.OnNode(u.GetLabels(), u.GetAnnotations(), node) &&
		u.GetAnnotations()[kubeobj.AnnotationBootID] != "" && u.GetDeletionTimestamp() == nil
}

// sibling is another device's node step of the same node under way, if one stands.
func (v nodeSteps) sibling(ctx context.Context, objs dynamic.ResourceInterface, in NodeInput) (*unstructured.Unstructured, error) {
	list, err := objs.List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(in.Node)})
	if err != nil {
		return nil, fmt.Errorf("list node steps of node %s: %w", in.Node, err)
	}
	for i := range list.Items {
		if o := &list.Items[i]; joinable(o, in.Node) && o.GetAnnotations()[kubeobj.AnnotationWorkflow] != in.WorkflowID {
			return o, nil
		}
	}
	return nil, nil
}

// waitReboot waits until the node booted again and is Ready, or r's deadline. Its own object is
// deleted either way; a joined one is its owner's, and when it is gone before the node booted
// again, the try found the node busy and is taken again.
func (v nodeSteps) waitReboot(ctx context.Context, in NodeInput, r reboot) (decide.StepResult, error) {
	a := v.a
	step := string(policy.RepairNode)
	done := func() {
		if !r.own {
			return
		}
		// One that cannot be deleted stays behind as an earlier try's: the next try deletes it
		// before it asks, and never takes its boot ID for its own.
		if err := r.objs.Delete(context.WithoutCancel(ctx), r.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			activity.GetLogger(ctx).Warn("node step's object not deleted", "object", r.what, "error", err)
		}
	}
	by := ""
	if !r.own {
		by = " (joined another device's node step)"
	}
	poll := a.CheckPoll
	if poll <= 0 {
		poll = 5 * time.Second
	}
	for {
		activity.RecordHeartbeat(ctx, r.what)
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			return decide.StepResult{}, fmt.Errorf("get node %s: %w", in.Node, err)
		}
		now, after := time.Now(), ""
		if node != nil {
			after = node.Status.NodeInfo.BootID
		}
		if node != nil && after != "" && after != r.before && nodeReady(node) {
			done()
			a.countTry(step, "passed")
			res := decide.StepResult{Passed: true, Reason: fmt.Sprintf("node %s booted again (boot ID %s, was %s) and is Ready, %s after %s was created%s",
				in.Node, short(after), short(r.before), now.Sub(r.created).Round(time.Second), r.what, by), At: now, BootID: after}
			(checkPods{a}).tryEvent(ctx, in.Node, step, in.Device, in.WorkflowID, in.Try, in.TryAt, res)
			return v.afterBoot(ctx, in, res, r.before)
		}
		if !r.own && after == r.before {
			// The owner deletes its object once it saw the node back: read the node again after
			// the object is gone, or this device would ask for a second reboot.
			if _, err := r.objs.Get(ctx, r.name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				if n, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{}); err != nil || n.Status.NodeInfo.BootID == r.before {
					return v.stepBusy("%s ended before node %s booted again; this device's try asks again", r.what, in.Node)
				}
				continue
			}
		}
		if !now.Before(r.deadline) {
			done()
			res, err := v.stepFailed("node %s did not boot again and turn Ready within %s of %s (boot ID %s, was %s)%s", in.Node,
				in.Step.Check.Timeout.D(), r.what, short(after), short(r.before), by)
			res.BootID = after
			(checkPods{a}).tryEvent(ctx, in.Node, step, in.Device, in.WorkflowID, in.Try, in.TryAt, res)
			return res, err
		}
		select {
		case <-ctx.Done():
			return decide.StepResult{}, ctx.Err() // the retry adopts the object and waits on
		case <-time.After(min(poll, time.Until(r.deadline))):
		}
	}
}

// stepFailed is a node step's failed try; stepBusy one that could not run yet.
func (v nodeSteps) stepFailed(format string, args ...any) (decide.StepResult, error) {
	a := v.a
	a.countTry(string(policy.RepairNode), "failed")
	return decide.StepResult{Reason: fmt.Sprintf(format, args...), At: time.Now()}, nil
}

func (v nodeSteps) stepBusy(format string, args ...any) (decide.StepResult, error) {
	a := v.a
	a.countTry(string(policy.RepairNode), "busy")
	return decide.StepResult{Busy: true, Reason: fmt.Sprintf(format, args...), At: time.Now()}, nil
}

// remediatorObjects is the client of the template's kind, and how to name it in a reason. No API
// serving that kind is an error that names it.
func (v nodeSteps) remediatorObjects(u *unstructured.Unstructured) (dynamic.ResourceInterface, string, error) {
	a := v.a
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

// nodeHolders says which Pods on the node hold a device ("" when none does), other than
// DeviceWarden's own checks, and names them: a reboot would end them.
func (v nodeSteps) nodeHolders(ctx context.Context, node string) (string, []string, error) {
	a := v.a
	pods, err := a.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", nil, fmt.Errorf("list pods on node %s: %w", node, err)
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
		return "", nil, nil
	case 1:
		return "Pod " + names[0] + ", which holds a device", names, nil
	}
	return fmt.Sprintf("%d Pods that hold devices (%s, ...)", len(names), names[0]), names, nil
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
