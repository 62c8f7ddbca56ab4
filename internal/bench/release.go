package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// ReleaseOptions configures the release benchmark.
type ReleaseOptions struct {
	Devices int
	// Sequential devices are released one at a time for the latency figures; the rest at once.
	Sequential int
	CacheDir   string
	Out        io.Writer
}

// Release measures the recovery review's own cost on a fresh stack: devices are quarantined and
// freed, then fixed in the simulator and released by an operator `release`; with a zero stability
// window the time until the rule is deleted is probe + probation + canary + release. First one
// device at a time (latency), then all the others at once (releases per second).
func Release(ctx context.Context, o ReleaseOptions) error {
	pols, err := policy.Parse([]byte("default:\n  stabilityWindow: 0s\n"))
	if err != nil {
		return err
	}
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{Policies: pols.WithIdentity(sim.Driver, sim.Identity...)},
		func(kube kubernetes.Interface, opts *app.ControllerOptions) {
			opts.Extra = append(opts.Extra, (&sim.Kubelet{Kube: kube}).Run)
		})
	if err != nil {
		return err
	}
	defer st.stop()
	kube, tc := st.kube, st.tc
	targets, err := setupPods(ctx, kube, o.Devices, o.Out)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "[bench] quarantining %d devices, then freeing them\n", len(targets))
	for _, tg := range targets {
		if err := sim.SetFault(ctx, kube, tg.id, corev1.ResourceHealthStatusUnhealthy, "bench"); err != nil {
			return err
		}
		if err := sim.WriteHealth(ctx, kube, tg.t, sim.CDIDeviceID(tg.id), corev1.ResourceHealthStatusUnhealthy, "bench"); err != nil {
			return err
		}
	}
	if err := waitRules(ctx, kube, len(targets)); err != nil {
		return err
	}
	if err := kube.CoreV1().Pods("bench").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := kube.ResourceV1().ResourceClaims("bench").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := waitFreed(ctx, kube); err != nil {
		return err
	}
	deleted, stop, err := watchRules(ctx, kube, watch.Deleted)
	if err != nil {
		return err
	}
	defer stop()
	fix := func(tg benchTarget) error {
		return sim.SetFault(ctx, kube, tg.id, corev1.ResourceHealthStatusHealthy, "")
	}
	release := func(tg benchTarget) error {
		_, err := api.SendCommand(ctx, tc, tg.id, devicemsg.Command{Kind: devicemsg.CmdRelease, Actor: "bench"}, nil)
		return err
	}
	seq := min(o.Sequential, len(targets))
	fmt.Fprintf(o.Out, "[bench] releasing %d devices one at a time\n", seq)
	var lat []time.Duration
	for _, tg := range targets[:seq] {
		start := time.Now()
		if err := fix(tg); err != nil {
			return err
		}
		if err := release(tg); err != nil {
			return err
		}
		select {
		case at := <-deleted(tg.id.TaintRuleName()):
			lat = append(lat, at.Sub(start))
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("%s not released after 2m", tg.id)
		}
	}
	printLatency(o.Out, "device fixed + release -> rule deleted (probe, probation, canary, zero window)", lat)
	rest := targets[seq:]
	if len(rest) == 0 {
		return nil
	}
	// The simulated driver keeps faults on one object per node: fix them first, then time the reviews.
	for _, tg := range rest {
		if err := fix(tg); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "[bench] releasing %d devices at once\n", len(rest))
	start := time.Now()
	errs := make(chan error, len(rest))
	for _, tg := range rest {
		go func() { errs <- release(tg) }()
	}
	for range rest {
		if err := <-errs; err != nil {
			return err
		}
	}
	var all []time.Duration
	for _, tg := range rest {
		select {
		case at := <-deleted(tg.id.TaintRuleName()):
			all = append(all, at.Sub(start))
		case <-time.After(5 * time.Minute):
			return fmt.Errorf("%s not released after 5m", tg.id)
		}
	}
	elapsed := time.Since(start)
	printLatency(o.Out, "  time to release, all at once", all)
	fmt.Fprintf(o.Out, "%d devices reviewed at once: all released in %s: %.1f releases/s\n", len(rest), elapsed.Round(time.Millisecond), float64(len(rest))/elapsed.Seconds())
	return nil
}

func waitRules(ctx context.Context, kube kubernetes.Interface, n int) error {
	return waitUntil(ctx, 2*time.Minute, func() (bool, error) {
		rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
		return err == nil && len(rules.Items) >= n, err
	})
}

func waitFreed(ctx context.Context, kube kubernetes.Interface) error {
	return waitUntil(ctx, 3*time.Minute, func() (bool, error) {
		claims, err := kube.ResourceV1().ResourceClaims("bench").List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0, err
	})
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
