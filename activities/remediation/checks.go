package remediation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// ErrNoIdentity is the non-retryable error type of a device that cannot be singled out.
const ErrNoIdentity = "NoDeviceIdentity"

// CheckInput runs a probe or canary Pod on exactly one device.
type CheckInput struct {
	Device device.ID `json:"device"`
	// Kind is decide.ActProbe or decide.ActCanary.
	Kind        decide.ActionKind `json:"kind"`
	Check       policy.Check      `json:"check"`
	DeviceClass string            `json:"deviceClass"`
	// Identity names the attributes that single out the device (policy, per driver).
	Identity []string `json:"identity"`
	// Review numbers the quarantine's review: a retried activity adopts its own Pod, and removes
	// anything older.
	Review     int    `json:"review"`
	WorkflowID string `json:"workflowID"`
	// Step is the repair step a repair Pod runs (its kind, for the metric).
	Step string `json:"step,omitempty"`
	// Idle are the devices no other claim may hold when a repair step starts (the device, or
	// every form of its physical unit); a step that finds one held runs nothing and says Busy.
	Idle []device.ID `json:"idle,omitempty"`
	// TryAt is when a repair try began (it names the try's Event).
	TryAt time.Time `json:"tryAt,omitempty"`
	// Attempts is how many attempts the workflow gives the activity. A repair Pod outlives an
	// attempt that failed with an error while another attempt follows: the retry adopts it, so a
	// try never runs the reset twice. 0 (a workflow before it): every attempt cleans up.
	Attempts int32 `json:"attempts,omitempty"`
	// Permit is the device whose reset permit a repair step holds (its workflow's device): the
	// step gives it back when it ends, saying whether the reset failed. Empty before it.
	Permit device.ID `json:"permit,omitempty"`
	// Domain is what a reset reaches (the driver's resetDomain; empty: the device alone), and
	// Holders whether the holders of its other devices are waited for or moved (the step's).
	Domain  string `json:"domain,omitempty"`
	Holders string `json:"holders,omitempty"`
	// Since is when the device's fault was last left unmended (decide.Plan.Since): a reset of
	// its domain that another device started since is joined, not run again.
	Since time.Time `json:"since,omitempty"`
}

// CheckName is the deterministic name of a device's probe or canary Pod and claim.
func CheckName(kind decide.ActionKind, id device.ID) string {
	sum := sha256.Sum256([]byte(id.String()))
	return "devicewarden-" + string(kind) + "-" + hex.EncodeToString(sum[:])[:16]
}

// RunCheck runs the check and waits for its outcome: the probe is a Pod, the canary a Job (one
// Pod, no retries), as a workload would run. Its own claim can be allocated only the device (its
// identifying attributes, on its node) and tolerates the taint of the stage. Everything is deleted
// afterwards, and by the next attempt when a worker died in between.
func (a *Activities) RunCheck(ctx context.Context, in CheckInput) (res decide.StepResult, err error) {
	doms, checks := domains{a}, checkPods{a}
	if in.Kind == decide.ActRepair && in.Permit.Valid() {
		defer func() {
			if err != nil && activity.GetInfo(ctx).Attempt < in.Attempts {
				return // the try goes on: its next attempt holds the permit
			}
			(permitBook{a}).resetEnded(in.Permit, res, err)
		}()
	}
	name := CheckName(in.Kind, in.Device)
	ns := in.Check.Namespace
	boot := ""
	end := func(result string, format string, args ...any) (decide.StepResult, error) {
		a.countCheck(in.Kind, result)
		a.countTry(in.Step, result)
		return decide.StepResult{Reason: fmt.Sprintf(format, args...), Pod: ns + "/" + name, At: time.Now(), BootID: boot, NotRun: result == resultNotRun}, nil
	}
	fail := func(format string, args ...any) (decide.StepResult, error) { return end(resultFailed, format, args...) }
	// notRun ends a check whose tool never ran on the device: no verdict on it.
	notRun := func(format string, args ...any) (decide.StepResult, error) { return end(resultNotRun, format, args...) }
	if in.Device.DevicePlugin() {
		return notRun("device-plugin devices cannot be probed: no API pins a Pod to one plugin device")
	}
	sel, node, env, published, err := checks.pinDevice(ctx, in)
	if err != nil {
		return decide.StepResult{}, err
	}
	if in.DeviceClass == "" {
		// No claim named a class for this device (its driver reported it directly): use the
		// driver's own check class.
		if in.DeviceClass, err = checks.checkClass(ctx, in.Device.Driver); err != nil {
			return decide.StepResult{}, err
		}
	}
	if sel == "" {
		return notRun("device %s is not published in its pool", in.Device)
	}
	var permit *domainPermit
	var started time.Time // when this attempt's reset of the domain began (zero: it did not)
	var keepFences bool   // the domain's fences stay with a busy answer (and the permit with them)
	if in.Kind == decide.ActRepair {
		boot = checks.bootID(ctx, node)
		peers := domainPeers(published, in.Device, in.Domain)
		if key := domainKey(published, in.Device, in.Domain); key != "" && len(peers) > 0 {
			p := doms.permitOf(key)
			if res, joined, err := doms.takeDomain(ctx, in, p); err != nil || joined {
				return res, err
			}
			permit = &p
			defer func() {
				if err != nil && activity.GetInfo(ctx).Attempt < in.Attempts || res.Busy && keepFences {
					return // the try goes on (its next attempt, or with its domain fenced): it keeps the permit
				}
				doms.endDomain(context.WithoutCancel(ctx), in, p, started, res, err)
			}()
		}
		held, busy, fenced, ierr := doms.domainIdle(ctx, in, node, withSiblings(published, in.Device, in.Idle), peers, ns+"/"+name)
		if ierr != nil || busy {
			keepFences = fenced
			return held, ierr
		}
		if len(peers) > 0 {
			defer func() {
				if err != nil && activity.GetInfo(ctx).Attempt < in.Attempts {
					return // the try goes on: its next attempt keeps the fences
				}
				if err == nil && !started.IsZero() && !res.Passed && !res.NotRun && !res.Busy {
					// The reset ran and failed: the devices it reached are quarantined by their
					// own workflows, and keep their domain fences until then.
					if left := doms.resetFailedPeers(context.WithoutCancel(ctx), in, node, peers, res); len(left) > 0 {
						activity.GetLogger(ctx).Warn("devices the failed reset reached keep their domain fences until its quarantine ends", "device", in.Device.String(), "left", fmt.Sprint(left))
					}
					return
				}
				// A fence that stays keeps new claims off a peer (the safe side) until the
				// quarantine's end lifts it; failing the step for it would run the reset again.
				if uerr := doms.unfenceDomain(context.WithoutCancel(ctx), node, in.WorkflowID); uerr != nil {
					activity.GetLogger(ctx).Warn("the reset's domain fences stay until its quarantine ends", "device", in.Device.String(), "error", uerr)
				}
			}()
		}
	}
	if err := kubeobj.EnsureNamespace(ctx, a.Kube, ns); err != nil {
		return decide.StepResult{}, err
	}
	if err := checks.clearStale(ctx, in.Kind, ns, name, in.Review); err != nil {
		return decide.StepResult{}, err
	}
	defer func() {
		if err != nil && in.Kind == decide.ActRepair && activity.GetInfo(ctx).Attempt < in.Attempts {
			return // the try goes on: the next attempt adopts the running Pod
		}
		checks.deleteCheck(ns, name)
	}()
	if permit != nil {
		// Joiners read when the domain's reset began.
		started = time.Now()
		if err := doms.markDomain(ctx, in, *permit, started, nil); err != nil {
			return decide.StepResult{}, fmt.Errorf("mark the reset of domain %s started: %w", permit.key, err)
		}
	}
	if err := checks.createCheck(ctx, in, ns, name, sel, node, env); err != nil {
		return decide.StepResult{}, err
	}
	deadline := time.Now().Add(in.Check.Timeout.D())
	podName, err := checks.checkPod(ctx, ns, name, deadline)
	if err != nil {
		return decide.StepResult{}, fmt.Errorf("find %s pod of %s/%s: %w", in.Kind, ns, name, err)
	}
	if podName == "" {
		return notRun("%s Job %s/%s made no Pod within %s", in.Kind, ns, name, in.Check.Timeout.D())
	}
	pod, err := checks.awaitPod(ctx, ns, podName, in.Check, deadline)
	if apierrors.IsNotFound(err) {
		return notRun("%s Pod %s/%s was deleted before it finished", in.Kind, ns, podName)
	}
	if err != nil {
		return decide.StepResult{}, fmt.Errorf("wait for %s pod %s/%s: %w", in.Kind, ns, podName, err)
	}
	res, done := checkOutcome(pod, in.Check)
	if res.NotRun {
		return notRun("%s Pod: %s", in.Kind, res.Reason)
	}
	if !done {
		if pod.Status.Phase == corev1.PodPending {
			return notRun("%s Pod did not start within %s (phase %s%s)", in.Kind, in.Check.Timeout.D(), pod.Status.Phase, scheduling(pod))
		}
		return fail("%s Pod did not finish within %s (phase %s%s)", in.Kind, in.Check.Timeout.D(), pod.Status.Phase, scheduling(pod))
	}
	result := resultFailed
	if res.Passed {
		result = resultPassed
	}
	a.countCheck(in.Kind, result)
	a.countTry(in.Step, result)
	res.Pod, res.At, res.BootID = ns+"/"+podName, time.Now(), boot
	if in.Kind == decide.ActRepair {
		checks.tryEvent(ctx, node, in.Step, in.Device, in.WorkflowID, in.Review, in.TryAt, res)
	}
	return res, nil
}

// awaitPod watches the Pod until it finishes or the deadline passes, heartbeating meanwhile, and
// returns its last state. A watch that ends early is resumed from the Pod's newest version.
func (v checkPods) awaitPod(ctx context.Context, ns, name string, c policy.Check, deadline time.Time) (*corev1.Pod, error) {
	a := v.a
	beat := a.CheckPoll
	if beat <= 0 {
		beat = 5 * time.Second
	}
	pods := a.Kube.CoreV1().Pods(ns)
	for {
		activity.RecordHeartbeat(ctx, name)
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if _, done := checkOutcome(pod, c); done || !time.Now().Before(deadline) {
			return pod, nil
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: pod.ResourceVersion})
		if err != nil {
			return nil, err
		}
		done := func() bool {
			defer w.Stop()
			ticker := time.NewTicker(beat)
			defer ticker.Stop()
			until := time.NewTimer(time.Until(deadline))
			defer until.Stop()
			for {
				select {
				case <-ctx.Done():
					return true
				case <-until.C:
					return true
				case <-ticker.C:
					activity.RecordHeartbeat(ctx, name)
				case ev, ok := <-w.ResultChan():
					if !ok {
						return false
					}
					if p, isPod := ev.Object.(*corev1.Pod); isPod {
						if _, finished := checkOutcome(p, c); finished || ev.Type == watch.Deleted {
							return true
						}
					}
				}
			}
		}()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if done {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			return p, err
		}
	}
}

// A check's or step's results, as its metrics count them: not-run is the tooling's failure.
const (
	resultPassed = "passed"
	resultFailed = "failed"
	resultNotRun = "not-run"
)

func (a *Activities) countCheck(kind decide.ActionKind, result string) {
	if a.Metrics != nil {
		a.Metrics.Checks.WithLabelValues(string(kind), result).Inc()
	}
}

// countTry counts a repair step's outcome.
func (a *Activities) countTry(step, result string) {
	if a.Metrics != nil && step != "" {
		a.Metrics.RepairTries.WithLabelValues(step, result).Inc()
	}
}

// checkOutcome reads a finished Pod: it passes when it succeeded and its own device reports, if
// any, are all Healthy. A Pod that ended without its tool running on the device (its image not
// pulled, evicted or preempted, refused by the kubelet, or its tool's exit code one the check
// names as "could not run") is done and not run: the tooling's failure, no verdict on the device.
func checkOutcome(pod *corev1.Pod, c policy.Check) (decide.StepResult, bool) {
	if why, ok := notRunPod(pod, c); ok {
		return decide.StepResult{Reason: why, NotRun: true}, true
	}
	var unhealthy []string
	for _, cs := range pod.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				if r.Health != corev1.ResourceHealthStatusHealthy {
					msg := string(r.ResourceID) + " " + string(r.Health)
					if r.Message != nil {
						msg += ": " + *r.Message
					}
					unhealthy = append(unhealthy, msg)
				}
			}
		}
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		if len(unhealthy) > 0 {
			return decide.StepResult{Reason: "exited 0 but its device reported " + strings.Join(unhealthy, "; ")}, true
		}
		return decide.StepResult{Passed: true, Reason: "exited 0, device Healthy"}, true
	case corev1.PodFailed:
		reason := "failed"
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				reason = fmt.Sprintf("exit code %d %s %s", t.ExitCode, t.Reason, t.Message)
			}
		}
		if len(unhealthy) > 0 {
			reason += "; device reported " + strings.Join(unhealthy, "; ")
		}
		return decide.StepResult{Reason: strings.TrimSpace(reason)}, true
	}
	return decide.StepResult{}, false
}

// pullFailures are the reasons a container waits with that no wait mends: its image cannot be
// pulled (after the kubelet's first failed pull and its back-off), or its Pod spec is wrong.
var pullFailures = []string{"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}

// notRunPod says whether the Pod ended, or will end, without its tool running on the device, and why.
func notRunPod(pod *corev1.Pod, c policy.Check) (string, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && slices.Contains(pullFailures, w.Reason) {
			return fmt.Sprintf("container %s not started: %s %s", cs.Name, w.Reason, w.Message), true
		}
	}
	if pod.Status.Phase != corev1.PodFailed {
		return "", false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
			return fmt.Sprintf("Pod disrupted (%s): %s", cond.Reason, cond.Message), true
		}
	}
	if pod.Status.Reason != "" {
		// Only the kubelet sets a failed Pod's reason: evicted, preempted, refused at admission,
		// shut down with its node.
		return fmt.Sprintf("Pod failed before its check ended: %s %s", pod.Status.Reason, pod.Status.Message), true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && c.NotRunBy(t.ExitCode) {
			return fmt.Sprintf("the tool could not run: exit code %d (the policy's notRunExitCodes) %s %s", t.ExitCode, t.Reason, t.Message), true
		}
	}
	return "", false
}

func scheduling(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue && c.Message != "" {
			return ": " + c.Message
		}
	}
	return ""
}

// pinDevice builds the CEL selector that matches only the device, from its published attributes,
// and returns its node and the environment that names it to the check's Pod (a reset tool needs
// to know which device to reset), with the driver's slices it read. An empty selector means the
// device is not published.
func (v checkPods) pinDevice(ctx context.Context, in CheckInput) (string, string, []corev1.EnvVar, []resourcev1.ResourceSlice, error) {
	a := v.a
	if len(in.Identity) == 0 {
		return "", "", nil, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no identity attributes for driver %s: name them in the policy file (drivers.%s.identity) so a probe cannot land on a neighbour", in.Device.Driver, in.Device.Driver),
			ErrNoIdentity, nil)
	}
	slices, err := a.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + in.Device.Driver})
	if err != nil {
		return "", "", nil, nil, fmt.Errorf("list resource slices of %s: %w", in.Device.Driver, err)
	}
	var found *resourcev1.Device
	var node string
	var gen int64 = -1
	for i := range slices.Items {
		s := &slices.Items[i]
		if s.Spec.Pool.Name != in.Device.Pool || s.Spec.Pool.Generation < gen {
			continue
		}
		for j := range s.Spec.Devices {
			if s.Spec.Devices[j].Name == in.Device.Device {
				found, gen, node = &s.Spec.Devices[j], s.Spec.Pool.Generation, ptr.Deref(s.Spec.NodeName, "")
			}
		}
	}
	if found == nil {
		return "", "", nil, slices.Items, nil
	}
	expr := []string{fmt.Sprintf("device.driver == %q", in.Device.Driver)}
	env := []corev1.EnvVar{{Name: "DEVICEWARDEN_DEVICE", Value: in.Device.String()}, {Name: "DEVICEWARDEN_NODE", Value: node}}
	for _, name := range in.Identity {
		env = append(env, corev1.EnvVar{Name: envName(name), Value: kubeobj.AttrValue(in.Device.Driver, name, found.Attributes)})
		e, err := kubeobj.AttrExpr(in.Device.Driver, name, found.Attributes)
		if err != nil {
			return "", "", nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("device %s: %v", in.Device, err), ErrNoIdentity, nil)
		}
		expr = append(expr, e)
	}
	return strings.Join(expr, " && "), node, env, slices.Items, nil
}

// envName is the variable an identifying attribute is given to a check's Pod as:
// "DEVICEWARDEN_ATTR_" and its name in capitals, every other character an underscore.
func envName(attr string) string {
	b := []byte("DEVICEWARDEN_ATTR_" + strings.ToUpper(attr))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// checkNamespaceError says what to do when a check cannot be created in its namespace.
func checkNamespaceError(ns string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("check namespace %s does not exist and this account may not create it (a cluster install lists it in the chart's checks.namespaces): %w", ns, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("no right to create checks in namespace %s (a cluster install lists it in the chart's checks.namespaces): %w", ns, err)
	}
	return err
}

// bootID is the node's boot ID, "" when it cannot be read: a repair step records it, so that a
// later node step can tell the node booted again since (a reboot another device's step asked for).
func (v checkPods) bootID(ctx context.Context, node string) string {
	a := v.a
	if node == "" {
		return ""
	}
	n, err := a.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return n.Status.NodeInfo.BootID
}

// domainIdle makes sure no device a reset reaches is held before it starts: the device and its
// unit's forms (idle), and its reset domain's other devices (peers), which it fences first and
// looks at again, so a Pod that lands between the look and the reset is not reset under. busy
// is true with the step's answer when one is held: with holders: move, the peers' holders are
// named to be moved and the fences stay; else they go, and the step waits. fenced says the
// fences stay with a busy answer: the try keeps the domain's permit with them, so no other reset
// of the domain takes the peers they fence.
func (v domains) domainIdle(ctx context.Context, in CheckInput, node string, idle, peers []device.ID, own string) (res decide.StepResult, busy, fenced bool, err error) {
	a := v.a
	wait := func(why string, holders []string, fenced bool) (decide.StepResult, bool, bool, error) {
		a.countTry(in.Step, "busy")
		return decide.StepResult{Busy: true, Reason: why, Holders: holders, At: time.Now()}, true, fenced, nil
	}
	held, err := (checkPods{a}).idleOrHeld(ctx, slices.Concat(idle, peers), own)
	if err != nil || held == "" && len(peers) == 0 {
		return decide.StepResult{}, false, false, err
	}
	if held != "" && (in.Holders != policy.HoldersMove || len(peers) == 0) {
		return wait(held, nil, false)
	}
	if err := v.fenceDomain(ctx, in, node, peers); err != nil {
		return decide.StepResult{}, false, false, err
	}
	if held == "" {
		if held, err = (checkPods{a}).idleOrHeld(ctx, slices.Concat(idle, peers), own); err != nil || held == "" {
			return decide.StepResult{}, false, false, err
		}
		if in.Holders != policy.HoldersMove {
			if err := v.unfenceDomain(ctx, node, in.WorkflowID); err != nil {
				return decide.StepResult{}, false, false, err
			}
			return wait(held+", which came as the reset's domain was fenced", nil, false)
		}
	}
	pods, err := v.claimHolders(ctx, peers, own)
	if err != nil {
		return decide.StepResult{}, false, false, err
	}
	if len(pods) == 0 {
		// No Pod reserves what holds. A peer's claim whose Pod is gone is being released (the
		// claim controller did not deallocate it within the settle wait): the fences stay, or
		// a new claim would take the peer as it frees. A form of the device's own unit, which
		// no reset moves, is waited for unfenced.
		onPeer, err := (checkPods{a}).claimedAny(ctx, peers, own)
		if err != nil {
			return decide.StepResult{}, false, false, err
		}
		if !onPeer {
			if err := v.unfenceDomain(ctx, node, in.WorkflowID); err != nil {
				return decide.StepResult{}, false, false, err
			}
		}
		return wait(held, nil, onPeer)
	}
	return wait(fmt.Sprintf("%s; the reset reaches %d other devices (reset domain %s): their holders %v are moved first, and new claims keep off them", held, len(peers), in.Domain, pods), pods, true)
}
