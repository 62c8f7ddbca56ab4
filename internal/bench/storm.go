package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// StormOptions configures the storm benchmark.
type StormOptions struct {
	Devices int
	// Healths are the runs, each on a fresh stack: every device turns this health at once.
	Healths  []string
	CacheDir string
	// Share is the part of the fleet the storm turns (0 or 1: all of it); the rest stays healthy.
	Share float64
	// Rest, when set, first measures the fleet at rest that long: CPU, heap, Temporal actions.
	Rest time.Duration
	// PGShards > 0 runs Temporal as the stock server on PostgreSQL with that many history shards
	// (the embedded SQLite server otherwise).
	PGShards int
	Out      io.Writer
}

// stormPolicy tolerates Unknown for 15 s, so restrictions (and their breaker budget) are reached
// inside the run; the breaker is the default one, as a fleet would run it.
const stormPolicy = "default:\n  toleranceWindow: 15s\n"

// Storm turns every device of a fleet Unknown (or Unhealthy) within seconds and reports how the
// circuit breaker, Temporal and the control plane cope, and how long one operator force-quarantine
// issued in the middle of the storm takes.
func Storm(ctx context.Context, o StormOptions) error {
	for _, h := range o.Healths {
		health, err := device.ParseHealth(h)
		if err != nil || health == device.Healthy {
			return fmt.Errorf("--health %q: want Unknown or Unhealthy", h)
		}
		if err := stormRun(ctx, o, health); err != nil {
			return fmt.Errorf("%s storm: %w", health, err)
		}
	}
	return nil
}

func stormRun(ctx context.Context, o StormOptions, health device.Health) error {
	pols, err := policy.Parse([]byte(stormPolicy))
	if err != nil {
		return err
	}
	st, err := startStackOn(ctx, o.CacheDir, o.Out, app.ControllerOptions{Policies: pols, Breaker: breaker.DefaultConfig()}, nil, o.PGShards)
	if err != nil {
		return err
	}
	defer st.stop()
	// The last node's 8 devices stay out of the storm: one of them is force-quarantined mid-storm.
	targets, err := placeFleet(ctx, st.kube, o.Devices+8, o.Out)
	if err != nil {
		return err
	}
	storm, reserve := targets[:stormSize(o)], targets[o.Devices:o.Devices+forces]
	writer, err := fastClient(st.cluster.Kubeconfig)
	if err != nil {
		return err
	}
	pods, err := writer.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	rules, stopRules, err := watchRules(ctx, st.kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopRules()

	fmt.Fprintf(o.Out, "[bench] %s storm: %d of %d devices on %d nodes, Temporal: %s, default breaker (%d actions per %s, %g%%), tolerance window 15s\n",
		health, len(storm), o.Devices, o.Devices/8, st.temporal, breaker.DefaultConfig().MaxCount, breaker.DefaultConfig().Window, breaker.DefaultConfig().MaxPercent)
	pids := st.cluster.Pids()
	maps.Copy(pids, st.temporalPids)
	if o.Rest > 0 {
		if err := atRest(ctx, st, pids, o.Rest, o.Devices, o.Out); err != nil {
			return err
		}
		if err := timeFleetPage(ctx, st, o.Out, "at rest"); err != nil {
			return err
		}
	}
	actions0, err := readActions(ctx, st)
	if err != nil {
		return err
	}
	cpu := startCPU(pids)
	t0 := time.Now()
	var written atomic.Int64
	writeErr := make(chan error, 1)
	var wg sync.WaitGroup
	work := make(chan benchTarget)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tg := range work {
				if err := stormWrite(ctx, writer, byName[tg.t.Pod], tg, health); err != nil {
					select {
					case writeErr <- err:
					default:
					}
					continue
				}
				written.Add(1)
			}
		}()
	}
	breakerOpen := watchBreaker(ctx, st.tc, health, t0)
	force := make(chan []forceResult, 1)
	go func() {
		var out []forceResult
		for k, tg := range reserve {
			out = append(out, forceMidStorm(ctx, st.tc, pols, tg.id, rules, t0, t0.Add(time.Duration(2*(k+1))*time.Second)))
		}
		force <- out
	}()
	for _, tg := range storm {
		work <- tg
	}
	close(work)
	wg.Wait()
	writes := time.Since(t0)
	select {
	case err := <-writeErr:
		return fmt.Errorf("write status: %w", err)
	default:
	}

	res, err := awaitStorm(ctx, st.tc, storm, reserve[0].id.Pool, health, t0, breakerOpen)
	if err != nil {
		return err
	}
	if err := res.check(ctx, st.tc, storm, reserve[0].id.Pool, health); err != nil {
		return err
	}
	spent := cpu.stop()
	actions1, err := readActions(ctx, st)
	if err != nil {
		return err
	}
	spent.holds = st.holds()
	forced := <-force
	var answered, seen []time.Duration
	for _, f := range forced {
		if f.err != nil {
			return fmt.Errorf("mid-storm force-quarantine: %w", f.err)
		}
		answered, seen = append(answered, f.answered), append(seen, f.ruleSeen)
	}
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	breakerLine := res.breakerWhat
	if res.breakerOpen > 0 {
		breakerLine += " at +" + sec(res.breakerOpen)
	}
	fmt.Fprintf(o.Out, "%s storm of %d devices: statuses written in %s; breaker %s; %d device workflows started, all by +%s; every report decided by +%s (p50 +%s)\n",
		health, len(storm), sec(writes), breakerLine, res.started, sec(res.allStarted), sec(res.decidedMax), sec(res.decidedP50))
	fmt.Fprintf(o.Out, "%s storm: automatic actions %d (quarantined %d, restricted %d), held by the breaker %d\n",
		health, res.quarantined+res.restricted, res.quarantined, res.restricted, res.held)
	fmt.Fprintf(o.Out, "%s storm: %d force-quarantines issued at +2s, +4s, ... during the storm: update answered p50 %s max %s; DeviceTaintRule seen p50 %s max %s after issue\n",
		health, len(forced), p50(answered).Round(time.Millisecond), maxDuration(answered).Round(time.Millisecond),
		p50(seen).Round(time.Millisecond), maxDuration(seen).Round(time.Millisecond))
	spent.print(o.Out, health, time.Since(t0))
	if actions1 != nil {
		printActions(o.Out, health, actions0, actions1, len(storm))
	}
	return timeFleetPage(ctx, st, o.Out, fmt.Sprintf("after the %s storm", health))
}

func fastClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := app.KubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	return kubernetes.NewForConfig(cfg)
}

// stormWrite sets the device's entry in its pod's status, re-reading the pod on a conflict.
func stormWrite(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, tg benchTarget, health device.Health) error {
	for range 5 {
		p := pod.DeepCopy()
		if !sim.SetEntry(p, tg.t, sim.CDIDeviceID(tg.id), corev1.ResourceHealthStatus(health), "storm") {
			return fmt.Errorf("pod %s has no container status", tg.t.Pod)
		}
		_, err := kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if pod, err = kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
	return fmt.Errorf("pod %s: status kept conflicting", tg.t.Pod)
}

type forceResult struct {
	issuedAt, answered, ruleSeen time.Duration
	err                          error
}

// forces is how many devices outside the storm are force-quarantined during it, 2 s apart.
const forces = 5

// forceMidStorm force-quarantines one device that is not in the storm, at the given time.
func forceMidStorm(ctx context.Context, tc client.Client, pols *policy.Set, id device.ID, rules func(string) <-chan time.Time, t0, at time.Time) forceResult {
	time.Sleep(time.Until(at))
	start := time.Now()
	cmd := devicemsg.Command{Kind: devicemsg.CmdForceQuarantine, Actor: "bench", Reason: "mid-storm"}
	if _, err := api.SendCommand(ctx, tc, id, cmd, &api.DeviceInput{Device: id, Node: id.Pool, Policy: pols.For("", id.Driver)}); err != nil {
		return forceResult{err: err}
	}
	answered := time.Since(start)
	select {
	case seen := <-rules(id.TaintRuleName()):
		return forceResult{issuedAt: start.Sub(t0), answered: answered, ruleSeen: seen.Sub(start)}
	case <-time.After(2 * time.Minute):
		return forceResult{err: fmt.Errorf("no DeviceTaintRule for %s", id)}
	case <-ctx.Done():
		return forceResult{err: ctx.Err()}
	}
}

type stormResult struct {
	breakerWhat                                     string
	breakerOpen, allStarted, decidedMax, decidedP50 time.Duration
	started                                         int
	quarantined, restricted, held                   int
}

// awaitStorm follows the storm until the breaker opened, every device has a workflow and every
// workflow has taken in the storm's report (its LastHeard, the workflow's clock when it did).
func awaitStorm(ctx context.Context, tc client.Client, storm []benchTarget, reserveNode string, health device.Health, t0 time.Time, breakerOpen <-chan time.Duration) (stormResult, error) {
	var r stormResult
	deadline := time.Now().Add(10 * time.Minute)
	r.breakerWhat = "opened"
	if health == device.Unknown {
		r.breakerWhat = "held further restrictions"
	}
	// A storm within the breaker's cap does not open it: the wait is for the workflows, and the
	// breaker's opening is read when it comes.
	readBreaker := func() {
		if r.breakerOpen == 0 {
			select {
			case d := <-breakerOpen:
				r.breakerOpen = d
			default:
			}
		}
	}
	for r.allStarted == 0 {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("after 10 minutes: breaker open at %s, %d workflows started", r.breakerOpen, r.started)
		}
		readBreaker()
		if n, err := deviceWorkflows(ctx, tc, reserveNode); err == nil {
			r.started = n
			if r.started >= len(storm) {
				r.allStarted = time.Since(t0)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	decided := make([]time.Duration, len(storm))
	pending := storm
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("after 10 minutes %d devices have not taken in the storm's report", len(pending))
		}
		var mu sync.Mutex
		var next []benchTarget
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, tg := range pending {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				s, err := deviceState(ctx, tc, tg.id)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || s.Health != health {
					next = append(next, tg)
					return
				}
				decided[i] = s.LastHeard.Sub(t0)
				switch {
				case s.State == devicemsg.Quarantined:
					r.quarantined++
				case s.State == devicemsg.Restricted:
					r.restricted++
				case s.Withheld:
					r.held++
				}
			}()
		}
		wg.Wait()
		pending = next
		if len(pending) > 0 {
			time.Sleep(time.Second)
		}
	}
	r.decidedMax, r.decidedP50 = maxDuration(decided), p50(decided)
	readBreaker()
	if r.breakerOpen == 0 {
		r.breakerWhat = "did not open (the storm was within its cap)"
	}
	return r, nil
}

func deviceState(ctx context.Context, tc client.Client, id device.ID) (devicemsg.DeviceView, error) {
	return api.QueryDevice(ctx, tc, id.WorkflowID(), "")
}

func maxDuration(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// watchBreaker polls the breaker from the storm's start and yields when it opened (for an Unknown
// storm: when it held further restrictions).
func watchBreaker(ctx context.Context, tc client.Client, health device.Health, t0 time.Time) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		bc := &api.BreakerClient{Client: tc}
		for ctx.Err() == nil {
			if b, err := bc.State(ctx); err == nil {
				if (health == device.Unknown && b.RestrictionsOpen) || (health != device.Unknown && b.Open) {
					out <- time.Since(t0)
					return
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	return out
}
