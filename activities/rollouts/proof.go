package rollouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// ErrProofImpossible: the phase cannot be proved as planned (no shared device of the class, shares
// that do not fit, a device with no identity): no retry fixes it, a person must.
const ErrProofImpossible = "ProofImpossible"

// ProveEnforcement runs the phase's enforcement proof on one free shared device of each shared
// class, driver version and node type of the phase: a baseline load alone on the whole device,
// then Tenants loads with their own ShareIDs, one of them noisy, started together. It returns a
// judged report per device and records each as an Event on its node. Load Pods and claims left by
// an earlier attempt (a worker that died mid-proof) are removed first; this attempt's are removed
// when it ends.
func (a *Activities) ProveEnforcement(ctx context.Context, in PhaseInput) (_ []rolloutplan.ProofReport, err error) {
	defer func() { err = permanent(err) }()
	if err := checkPhase(in.Plan, in.Phase, ErrInvalidRolloutInput); err != nil {
		return nil, err
	}
	ph := in.Plan.Phases[in.Phase]
	e := ph.Enforcement
	if e == nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("phase %s asks for no enforcement proof", ph.Name), ErrInvalidRolloutInput, nil)
	}
	sel := kubeobj.LabelProof + "=" + proofLabel(in.Plan.Name, ph.Name)
	if err := kubeobj.EnsureNamespace(ctx, a.Kube, e.Namespace); err != nil {
		return nil, err
	}
	if err := a.clearProof(ctx, e.Namespace, sel); err != nil {
		return nil, err
	}
	defer a.deleteProof(e.Namespace, sel)
	targets, err := a.awaitTargets(ctx, in.Plan, ph)
	if err != nil {
		return nil, err
	}
	var out []rolloutplan.ProofReport
	for i, t := range targets {
		rep, err := a.proveOn(ctx, in.Plan.Name, ph, t, i, sel)
		if err != nil {
			return nil, fmt.Errorf("proof on %s (%s): %w", t.node, t.group, err)
		}
		out = append(out, rep)
		a.proofEvent(ctx, t.node, in.Plan.Name, rep)
	}
	return out, nil
}

// publishWait bounds how long a proof waits for the phase's driver to publish its shared devices
// (it may have been switched moments before) or for one of them to be free.
const publishWait = 2 * time.Minute

// notYet is a target search that a later look may get past: no shared device published yet, or
// none free. Permanent says whether it still is an error no retry fixes once publishWait is over.
type notYet struct {
	msg       string
	permanent bool
}

func (e notYet) Error() string { return e.msg }

// awaitTargets looks for the proof's devices until the driver has published them and one of each
// group is free, for at most publishWait.
func (a *Activities) awaitTargets(ctx context.Context, p rolloutplan.Plan, ph rolloutplan.Phase) ([]proofTarget, error) {
	wait := publishWait
	if a.ProofWait > 0 {
		wait = a.ProofWait
	}
	deadline := time.Now().Add(wait)
	for {
		targets, err := a.proofTargets(ctx, p, ph)
		var later notYet
		if !errors.As(err, &later) {
			return targets, err
		}
		if time.Now().After(deadline) {
			if later.permanent {
				return nil, temporal.NewNonRetryableApplicationError(later.msg+" after "+wait.String(), ErrProofImpossible, nil)
			}
			return nil, err
		}
		heartbeat(ctx, "waiting for a device to prove on: "+later.msg)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// proofLabel is the value of the proof label on one phase's load Pods and claims.
func proofLabel(rollout, phase string) string {
	return kubeobj.LabelValue(rollout + "." + phase)
}

// proofTarget is the device a proof runs on.
type proofTarget struct {
	class    rolloutplan.Class
	group    rolloutplan.ProofGroup
	node     string
	device   string // pool/device
	capacity resource.Quantity
	pin      string
}

// proofTargets picks, for each shared class, one device of each driver version and node type on
// the phase's nodes: shared, with the capacity the shares are of, and allocated to no claim.
func (a *Activities) proofTargets(ctx context.Context, p rolloutplan.Plan, ph rolloutplan.Phase) ([]proofTarget, error) {
	e := ph.Enforcement
	nodes, err := a.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ph.Nodes})
	if err != nil {
		return nil, fmt.Errorf("list nodes %q: %w", ph.Nodes, err)
	}
	nodeType := map[string]string{}
	for _, n := range nodes.Items {
		nodeType[n.Name] = n.Labels[e.NodeType]
	}
	busy, err := a.allocatedDevices(ctx)
	if err != nil {
		return nil, err
	}
	impossible := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrProofImpossible, nil)
	}
	share := resource.MustParse(e.Share) // checked with the plan
	var out []proofTarget
	for _, class := range ph.SharedClasses() {
		list, err := a.driverSlices(ctx, []string{class.Driver})
		if err != nil {
			return nil, err
		}
		slices.SortFunc(list, func(x, y *resourcev1.ResourceSlice) int { return strings.Compare(x.Name, y.Name) })
		seen := map[rolloutplan.ProofGroup]bool{}
		groups := map[rolloutplan.ProofGroup]bool{}
		shared := false
		for _, sl := range list {
			node := ptr.Deref(sl.Spec.NodeName, "")
			if _, ok := nodeType[node]; !ok {
				continue
			}
			for _, d := range sl.Spec.Devices {
				c, ok := d.Capacity[resourcev1.QualifiedName(e.Capacity)]
				if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || !ok {
					continue
				}
				shared = true
				g := rolloutplan.ProofGroup{DriverVersion: kubeobj.AttrValue(class.Driver, e.DriverVersion, d.Attributes), NodeType: nodeType[node]}
				groups[g] = true
				id := class.Driver + "/" + sl.Spec.Pool.Name + "/" + d.Name
				if seen[g] || busy[id] {
					continue
				}
				need := share.DeepCopy()
				need.Mul(int64(e.Tenants))
				if need.Cmp(c.Value) > 0 {
					return nil, impossible("class %s: %d tenants of %s need %s of %s, and device %s has %s", class.Name, e.Tenants, e.Share, need.String(), e.Capacity, id, c.Value.String())
				}
				pin := []string{fmt.Sprintf("device.driver == %q", class.Driver)}
				for _, attr := range e.Identity {
					x, err := kubeobj.AttrExpr(class.Driver, attr, d.Attributes)
					if err != nil {
						return nil, impossible("device %s %v: name the attributes that single it out in enforcement.identity", id, err)
					}
					pin = append(pin, x)
				}
				seen[g] = true
				out = append(out, proofTarget{class: class, group: g, node: node, device: sl.Spec.Pool.Name + "/" + d.Name, capacity: c.Value, pin: strings.Join(pin, " && ")})
			}
		}
		if !shared {
			return nil, notYet{msg: fmt.Sprintf("class %s: no shared device with a %s capacity on the phase's nodes (%s): the driver publishes none to prove", class.Name, e.Capacity, ph.Nodes), permanent: true}
		}
		for g := range groups {
			if !seen[g] {
				return nil, notYet{msg: fmt.Sprintf("class %s: every shared device of %s is allocated: none free to prove on", class.Name, g)}
			}
		}
	}
	return out, nil
}

// allocatedDevices are the devices (driver/pool/device) some claim has an allocation on.
func (a *Activities) allocatedDevices(ctx context.Context) (map[string]bool, error) {
	claims, err := a.Kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	out := map[string]bool{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			out[r.Driver+"/"+r.Pool+"/"+r.Device] = true
		}
	}
	return out, nil
}

// load is one load Pod of a stage.
type load struct {
	role    string
	request resource.Quantity
	demand  float64
}

// proveOn runs the baseline and the contention on one device and judges them.
func (a *Activities) proveOn(ctx context.Context, rollout string, ph rolloutplan.Phase, t proofTarget, i int, sel string) (rolloutplan.ProofReport, error) {
	e := ph.Enforcement
	share := resource.MustParse(e.Share)
	frac := share.AsApproximateFloat64() / t.capacity.AsApproximateFloat64()
	rep := rolloutplan.ProofReport{Phase: ph.Name, Class: t.class.Name, Group: t.group, Node: t.node, Device: t.device, Capacity: e.Capacity,
		CapacityValue: t.capacity.String(), Share: e.Share, Noisy: e.Noisy, Tolerance: e.Tolerance, Duration: e.Duration.D()}
	base, err := a.runStage(ctx, rollout, ph, t, fmt.Sprintf("%d-b", i), sel, []load{{role: rolloutplan.RoleBaseline, request: t.capacity, demand: 1}})
	if err != nil {
		return rep, fmt.Errorf("baseline: %w", err)
	}
	rep.Baseline = base[0].Result
	loads := make([]load, 0, e.Tenants)
	for j := 1; j < e.Tenants; j++ {
		loads = append(loads, load{role: rolloutplan.RoleTenant, request: share, demand: frac})
	}
	loads = append(loads, load{role: rolloutplan.RoleNoisy, request: share, demand: min(1, e.Noisy*frac)})
	tenants, err := a.runStage(ctx, rollout, ph, t, fmt.Sprintf("%d-c", i), sel, loads)
	if err != nil {
		return rep, fmt.Errorf("contention: %w", err)
	}
	for k := range tenants {
		tenants[k].Expected = tenants[k].Fraction * rep.Baseline.Throughput
	}
	rep.Tenants = tenants
	rep.At = time.Now()
	rep.Judge()
	return rep, nil
}

// runStage creates a claim and a load Pod per load, all starting their load at the same moment,
// waits for every one to end and reads its result. The stage's objects are deleted when it ends,
// so the next stage finds the device free.
func (a *Activities) runStage(ctx context.Context, rollout string, ph rolloutplan.Phase, t proofTarget, stage, sel string, loads []load) ([]rolloutplan.TenantFigures, error) {
	e := ph.Enforcement
	ns := e.Namespace
	stageSel := sel + "," + kubeobj.LabelProofStage + "=" + stage
	defer func() { _ = a.clearProof(ctx, ns, stageSel) }() // deletes even when ctx has ended
	start := time.Now().Add(e.StartDelay.D()).UTC()
	names := make([]string, len(loads))
	for j, l := range loads {
		names[j] = proofName(rollout, ph.Name, stage, j)
		if err := a.createLoad(ctx, ph, t, names[j], sel, stage, start, l); err != nil {
			return nil, err
		}
	}
	out := make([]rolloutplan.TenantFigures, len(loads))
	done := make([]bool, len(loads))
	var err error
	for left := len(loads); left > 0; {
		left = 0
		for j := range loads {
			if done[j] {
				continue
			}
			// The claim's share is read while the load runs: once its Pod ends, the claim is
			// deallocated.
			if out[j].Fraction == 0 {
				if out[j].ShareID, out[j].Fraction, err = a.claimShare(ctx, ns, names[j], t.capacity, e.Capacity); err != nil {
					return nil, err
				}
			}
			f, finished, err := a.loadResult(ctx, ns, names[j], start, out[j])
			if err != nil {
				return nil, err
			}
			if !finished {
				left++
				continue
			}
			f.Role = loads[j].role
			out[j], done[j] = f, true
		}
		heartbeat(ctx, fmt.Sprintf("%s on %s/%s: %d of %d loads finished", stage, t.node, t.device, len(loads)-left, len(loads)))
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d load Pods had not finished: %w", left, len(loads), ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return out, nil
}

// proofName is a load Pod's (and its claim's) name: short, and the same for the same stage.
func proofName(rollout, phase, stage string, j int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(rollout + "/" + phase))
	return fmt.Sprintf("proof-%08x-%s-%d", h.Sum32(), stage, j)
}

// createLoad makes one load's claim (its request of the device's capacity, pinned to the device)
// and its Pod.
func (a *Activities) createLoad(ctx context.Context, ph rolloutplan.Phase, t proofTarget, name, sel, stage string, start time.Time, l load) error {
	e := ph.Enforcement
	labels := map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelProofStage: stage, kubeobj.LabelRole: l.role,
		kubeobj.LabelCheck: "proof"}
	k, v, _ := strings.Cut(sel, "=")
	labels[k] = v
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace, Labels: labels},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "device",
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: t.class.Name, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: t.pin}}},
				Capacity:  &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{resourcev1.QualifiedName(e.Capacity): l.request}},
			},
		}}}},
	}
	if _, err := a.Kube.ResourceV1().ResourceClaims(e.Namespace).Create(ctx, claim, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create load claim %s/%s: %w", e.Namespace, name, err)
	}
	env := []corev1.EnvVar{
		{Name: "DEVICEWARDEN_ROLE", Value: l.role},
		{Name: "DEVICEWARDEN_SHARE_FRACTION", Value: strconv.FormatFloat(l.request.AsApproximateFloat64()/t.capacity.AsApproximateFloat64(), 'f', 4, 64)},
		{Name: "DEVICEWARDEN_DEMAND_FRACTION", Value: strconv.FormatFloat(l.demand, 'f', 4, 64)},
		{Name: "DEVICEWARDEN_START_AT", Value: start.Format(time.RFC3339Nano)},
		{Name: "DEVICEWARDEN_DURATION", Value: e.Duration.D().String()},
		{Name: "DEVICEWARDEN_DEVICE", Value: t.class.Driver + "/" + t.device},
		{Name: "DEVICEWARDEN_NODE", Value: t.node},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			ActiveDeadlineSeconds:         ptr.To(int64(e.Timeout.D().Seconds())),
			NodeSelector:                  map[string]string{corev1.LabelHostname: t.node},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To(name)}},
			Containers: []corev1.Container{{
				Name: "load", Image: e.Image, Command: e.Command, Env: env,
				Resources:                corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "device"}}},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
	if _, err := a.Kube.CoreV1().Pods(e.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create load Pod %s/%s: %w", e.Namespace, name, err)
	}
	return nil
}

// claimShare reads a load claim's ShareID and its share of the device's capacity (0 while it is
// not allocated).
func (a *Activities) claimShare(ctx context.Context, ns, name string, capacity resource.Quantity, capName string) (string, float64, error) {
	claim, err := a.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", 0, fmt.Errorf("get load claim %s/%s: %w", ns, name, err)
	}
	if claim.Status.Allocation == nil || capacity.Sign() <= 0 {
		return "", 0, nil
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if q, ok := r.ConsumedCapacity[resourcev1.QualifiedName(capName)]; ok {
			return string(ptr.Deref(r.ShareID, "")), q.AsApproximateFloat64() / capacity.AsApproximateFloat64(), nil
		}
	}
	return "", 0, nil
}

// loadResult reads a finished load Pod's result into f, which holds its claim's share as read
// while it ran: finished false while it runs. A Pod that ended with no readable result, or
// started its load late, or whose claim's share was never seen, is an error (the attempt is
// retried).
func (a *Activities) loadResult(ctx context.Context, ns, name string, start time.Time, f rolloutplan.TenantFigures) (rolloutplan.TenantFigures, bool, error) {
	f.Pod = name
	pod, err := a.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return f, false, fmt.Errorf("get load Pod %s/%s: %w", ns, name, err)
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return f, false, nil
	}
	var term *corev1.ContainerStateTerminated
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			term = cs.State.Terminated
		}
	}
	if term == nil {
		return f, false, fmt.Errorf("load Pod %s/%s ended %s with no container status (%s): its result is lost", ns, name, pod.Status.Phase, pod.Status.Message)
	}
	if !term.StartedAt.IsZero() && term.StartedAt.After(start) {
		return f, false, fmt.Errorf("load Pod %s/%s started at %s, after the loads' common start %s: raise enforcement.startDelay", ns, name,
			term.StartedAt.UTC().Format(time.RFC3339), start.Format(time.RFC3339))
	}
	if err := json.Unmarshal([]byte(term.Message), &f.Result); err != nil {
		return f, false, fmt.Errorf("load Pod %s/%s ended %s (exit %d) with no result in its termination message (%q): %v", ns, name, pod.Status.Phase, term.ExitCode, cut(term.Message, 200), err)
	}
	if err := f.Result.Valid(); err != nil {
		return f, false, fmt.Errorf("load Pod %s/%s: %w", ns, name, err)
	}
	if f.Fraction == 0 {
		return f, false, fmt.Errorf("load claim %s/%s was never seen allocated with a share of the capacity: its share is unknown", ns, name)
	}
	return f, true, nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// clearProof deletes the proof objects sel selects and waits until they are gone.
func (a *Activities) clearProof(ctx context.Context, ns, sel string) error {
	a.deleteProof(ns, sel)
	deadline := time.Now().Add(time.Minute)
	for {
		pods, err := a.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return fmt.Errorf("list load Pods: %w", err)
		}
		claims, err := a.Kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return fmt.Errorf("list load claims: %w", err)
		}
		if len(pods.Items)+len(claims.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d load Pods and %d claims of an earlier proof still there after a minute", len(pods.Items), len(claims.Items))
		}
		heartbeat(ctx, "clearing an earlier proof's load Pods")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteProof deletes the proof's Pods and claims; it runs even when the activity's context ended.
func (a *Activities) deleteProof(ns, sel string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One by one rather than a collection: DeviceWarden's role may delete, not delete collections.
	if pods, err := a.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel}); err == nil {
		for _, p := range pods.Items {
			_ = a.Kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		}
	}
	if claims, err := a.Kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: sel}); err == nil {
		for _, c := range claims.Items {
			_ = a.Kube.ResourceV1().ResourceClaims(ns).Delete(ctx, c.Name, metav1.DeleteOptions{})
		}
	}
}

// proofEvent records a proof's verdict on the node it ran on (Warning when not enforced).
func (a *Activities) proofEvent(ctx context.Context, node, rollout string, rep rolloutplan.ProofReport) {
	reason, typ := kubeobj.EventEnforcementProven, corev1.EventTypeNormal
	if !rep.Enforced {
		reason, typ = kubeobj.EventEnforcementNotProven, corev1.EventTypeWarning
	}
	msg := fmt.Sprintf("rollout %s phase %s: %s", rollout, rep.Phase, rep.Summary())
	ref := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node}
	if n, err := a.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		ref.UID = n.UID
	}
	if err := kubeobj.CreateEvent(ctx, a.Kube, ref, reason, typ, cut(msg, 1000), fmt.Sprintf("%s.%x", node, time.Now().UnixNano()), "devicewarden.io/rollout"); err != nil {
		activity.GetLogger(ctx).Warn("event not recorded", "node", node, "reason", reason, "error", err)
	}
}

// heartbeat tells Temporal (and the UI's pending activity) where the proof is.
func heartbeat(ctx context.Context, details string) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details)
	}
}
