package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// RepairOptions configures the repair benchmark.
type RepairOptions struct {
	// Devices get a transient fault one at a time and are repaired by the ladder; Floor more
	// devices are repaired by hand, the same steps with nothing around them.
	Devices, Floor int
	CacheDir       string
	Out            io.Writer
}

// repairPolicy resets with the simulated driver's tool, then probes and canaries with a zero
// stability window: a repair with no person and no waiting of its own.
const repairPolicy = `
default:
  stabilityWindow: 0s
  repair:
    steps:
      - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 1m}
`

// Repair measures time to repair on a fresh stack: a device's Pod reports a transient fault, the
// rule appears, the Pod leaves (as a migration would move it), the ladder resets the idle device,
// probes, canaries and deletes the rule. Time runs from the report to the rule's deletion. The
// floor, in the same run on other devices: the same device steps done by hand, timed from the
// Pod's deletion to the rule's (delete the Pod, run the reset Pod, delete the rule).
func Repair(ctx context.Context, o RepairOptions) error {
	pols, err := policy.Parse([]byte(repairPolicy))
	if err != nil {
		return err
	}
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{Policies: pols.WithIdentity(sim.Driver, sim.Identity...),
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 10 * (o.Devices + o.Floor), MaxResets: o.Devices + o.Floor}},
		func(kube kubernetes.Interface, opts *app.ControllerOptions) {
			opts.Extra = append(opts.Extra, (&sim.Kubelet{Kube: kube}).Run)
		})
	if err != nil {
		return err
	}
	defer st.stop()
	kube := st.kube
	targets, err := setupPods(ctx, kube, o.Devices+o.Floor, o.Out)
	if err != nil {
		return err
	}
	added, stopAdded, err := watchRules(ctx, kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopAdded()
	deleted, stopDeleted, err := watchRules(ctx, kube, watch.Deleted)
	if err != nil {
		return err
	}
	defer stopDeleted()

	fmt.Fprintf(o.Out, "[bench] %d transient faults, one at a time, repaired by the ladder\n", o.Devices)
	var lat []time.Duration
	for _, tg := range targets[:o.Devices] {
		if err := sim.SetFaultKind(ctx, kube, tg.id, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
			return err
		}
		start := time.Now()
		if err := sim.WriteHealth(ctx, kube, tg.t, sim.CDIDeviceID(tg.id), corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
			return err
		}
		rule := tg.id.TaintRuleName()
		if err := within(ctx, added(rule), time.Minute, rule+" created"); err != nil {
			return err
		}
		if err := deletePod(ctx, kube, tg.t.Namespace, tg.t.Pod); err != nil {
			return err
		}
		select {
		case at := <-deleted(rule):
			lat = append(lat, at.Sub(start))
		case <-time.After(3 * time.Minute):
			if ds, err := api.QueryDevice(ctx, st.tc, tg.id.WorkflowID(), ""); err == nil && ds.Quarantine != nil {
				return fmt.Errorf("%s not repaired after 3m: %s; reporters %+v; ladder %+v; transitions %+v", tg.id, ds.Summary, ds.Reporters, ds.Quarantine.Ladder, ds.Transitions)
			}
			return fmt.Errorf("%s not repaired after 3m", tg.id)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	printLatency(o.Out, "report -> rule deleted (quarantine, holder gone, reset, probe, canary, release)", lat)

	fmt.Fprintf(o.Out, "[bench] floor: the same device steps by hand on %d devices\n", o.Floor)
	var floor []time.Duration
	for i, tg := range targets[o.Devices:] {
		// Untimed: the device is faulty and fenced, as DeviceWarden's rule would leave it.
		if err := sim.SetFaultKind(ctx, kube, tg.id, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
			return err
		}
		name := fmt.Sprintf("bench-floor-repair-%d", i)
		if _, err := kube.ResourceV1().DeviceTaintRules().Create(ctx, &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(tg.id.Driver), Pool: ptr.To(tg.id.Pool), Device: ptr.To(tg.id.Device)},
				Taint:          resourcev1.DeviceTaint{Key: devicemsg.TaintQuarantine, Effect: resourcev1.DeviceTaintEffectNoSchedule},
			}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create floor rule: %w", err)
		}
		if err := within(ctx, added(name), time.Minute, name+" created"); err != nil {
			return err
		}
		start := time.Now()
		if err := deletePod(ctx, kube, tg.t.Namespace, tg.t.Pod); err != nil {
			return err
		}
		if err := resetByHand(ctx, kube, tg, i); err != nil {
			return err
		}
		if err := kube.ResourceV1().DeviceTaintRules().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete floor rule: %w", err)
		}
		if err := within(ctx, deleted(name), time.Minute, name+" deleted"); err != nil {
			return err
		}
		floor = append(floor, time.Since(start))
	}
	printLatency(o.Out, "floor: delete the Pod, run the reset Pod, delete the rule", floor)
	return nil
}

// within waits for ch, for at most d.
func within(ctx context.Context, ch <-chan time.Time, d time.Duration, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(d):
		return fmt.Errorf("%s: not seen after %s", what, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deletePod deletes a Pod and waits until it and its claim are gone: the device is idle.
func deletePod(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	if err := kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	return waitUntil(ctx, time.Minute, func() (bool, error) {
		_, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		claims, err := kube.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range claims.Items {
			for _, r := range c.OwnerReferences {
				if r.Name == name {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// resetByHand runs the simulated driver's reset tool on the device as a person would: a claim
// pinned to the device that tolerates its quarantine, a Pod with the reset image, wait until it
// succeeds, delete both.
func resetByHand(ctx context.Context, kube kubernetes.Interface, tg benchTarget, i int) error {
	const ns = "bench"
	name := fmt.Sprintf("floor-reset-%d", i)
	idx := tg.id.Device[len("gpu-"):]
	sel := fmt.Sprintf(`device.driver == %q && device.attributes[%q].%s == %q && device.attributes[%q].%s == %s`,
		sim.Driver, sim.Driver, sim.AttrNode, tg.id.Pool, sim.Driver, sim.AttrIndex, idx)
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "device",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors:   []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: sel}}},
				Tolerations: []resourcev1.DeviceToleration{{Key: devicemsg.TaintQuarantine, Operator: resourcev1.DeviceTolerationOpExists}}}}}}}}
	if _, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create reset claim: %w", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{kubeobj.LabelCheck: name}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: map[string]string{corev1.LabelHostname: tg.id.Pool},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To(name)}},
			Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "reset", Image: sim.ResetImage, Command: []string{"reset"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "device"}}}}}}}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create reset pod: %w", err)
	}
	if err := waitUntil(ctx, time.Minute, func() (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("reset pod %s failed", name)
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	}); err != nil {
		return err
	}
	_ = kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	return kube.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
}
