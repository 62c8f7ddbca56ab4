package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// CausesOptions configures the fault-mix benchmark.
type CausesOptions struct {
	// Faults are drawn from Mix (weights per catalogue class: application, reset, node, replace).
	Faults int
	Mix    map[string]int
	// Reboot and Drain are what a node's reboot and a whole-node drain take on the fleet (the
	// simulator reboots at once); GPUsPerNode is how many GPUs a node-level remediation takes out.
	Reboot, Drain time.Duration
	GPUsPerNode   int
	// Storm more devices get a reset-first fault at once after the mix, under the default reset
	// budget (breaker.DefaultMaxResets at a time): what a storm costs (0: none).
	Storm    int
	Seed     uint64
	CacheDir string
	Out      io.Writer
}

// MixClasses are the classes a mix weighs, in the order the report lists them.
var MixClasses = []string{"application", "reset", "node", "replace"}

// ParseMix reads "application=40,reset=35,node=15,replace=10".
func ParseMix(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("mix %q: want class=weight, e.g. application=40,reset=35,node=15,replace=10", part)
		}
		if !slices.Contains(MixClasses, k) {
			return nil, fmt.Errorf("mix: unknown class %q: want %s", k, strings.Join(MixClasses, ", "))
		}
		out[k] = n
	}
	total := 0
	for _, n := range out {
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("mix %q weighs nothing", s)
	}
	return out, nil
}

// causesPolicy is a ladder of a reset and a node step (the simulator's remediator), with the
// shipped causes: the cause of each fault chooses where it starts.
const causesPolicy = `
default:
  stabilityWindow: 0s
  repair:
    steps:
      - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 1m}
      - kind: node
        timeout: 1m
        template: {apiVersion: ` + sim.RebootGroup + `/` + sim.RebootVersion + `, kind: ` + sim.RebootKind + `, spec: {nodeName: "{{ .Node }}"}}
`

// mixFault is one fault of the mix and what it cost.
type mixFault struct {
	class string
	id    device.ID
	pod   string
	// measured is the faulty GPU's time out of service on the stack (fault -> rule deleted; 0
	// for an application's fault, which is never fenced; fault -> retired for a replace fault).
	measured time.Duration
	first    string
}

// Causes runs a mix of faults drawn from the catalogue's classes through the real stack, one at a
// time, each on a node of its own with one Pod on the faulty GPU, and reports the GPU-hours out of
// service per 100 faults: the device-level ladder (measured, plus the fleet's reboot time for a
// node step, which also takes the node's other GPUs out while it reboots) against a node-level
// remediator that cordons, drains and reboots the whole node for every fault.
func Causes(ctx context.Context, o CausesOptions) error {
	pols, err := policy.Parse([]byte(causesPolicy))
	if err != nil {
		return err
	}
	n := o.Faults
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{Policies: pols.WithIdentity(sim.Driver, sim.Identity...),
		Breaker: breaker.Config{Window: 10 * time.Minute, MaxCount: 10 * (n + o.Storm), MaxReboots: n}},
		func(kube kubernetes.Interface, opts *app.ControllerOptions) {
			opts.Extra = append(opts.Extra, (&sim.Kubelet{Kube: kube}).Run, (&sim.Remediator{Kube: kube}).Run)
		})
	if err != nil {
		return err
	}
	defer st.stop()
	faults := drawMix(o, n)
	nodes, err := sim.CreateNodes(ctx, st.kube, "mix", n, o.GPUsPerNode)
	if err != nil {
		return err
	}
	const ns = "mix"
	if err := sim.EnsureNamespace(ctx, st.kube, ns); err != nil {
		return err
	}
	for i := range faults {
		faults[i].id = device.ID{Driver: sim.Driver, Pool: nodes[i], Device: "gpu-0"}
		faults[i].pod = fmt.Sprintf("job-%d", i)
		if _, err := (sim.Workload{Namespace: ns, Name: faults[i].pod, Node: nodes[i], Index: ptr.To(0)}).Create(ctx, st.kube); err != nil {
			return err
		}
	}
	if err := waitRunning(ctx, st.kube, ns, n, 3*time.Minute); err != nil {
		return err
	}
	added, stopAdded, err := watchRules(ctx, st.kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopAdded()
	deleted, stopDeleted, err := watchRules(ctx, st.kube, watch.Deleted)
	if err != nil {
		return err
	}
	defer stopDeleted()
	fmt.Fprintf(o.Out, "[bench] %d faults drawn from %v, one at a time\n", n, o.Mix)
	for i := range faults {
		if err := runMixFault(ctx, st, &faults[i], added, deleted); err != nil {
			return fmt.Errorf("fault %d (%s on %s): %w", i, faults[i].class, faults[i].id, err)
		}
	}
	reportMix(o, faults)
	if o.Storm > 0 {
		return causeStorm(ctx, st, o, added, deleted)
	}
	return nil
}

// causeStorm gives o.Storm idle devices a reset-first fault at once (their holders leave together)
// and reports when each was back, and the GPU-hours the storm cost.
func causeStorm(ctx context.Context, st *stack, o CausesOptions, added, deleted func(string) <-chan time.Time) error {
	targets, err := setupPods(ctx, st.kube, o.Storm, o.Out)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "[bench] a storm: %d devices fail at once (XID 48), %d resets at a time\n", o.Storm, breaker.DefaultMaxResets)
	start := time.Now()
	for _, tg := range targets {
		if err := sim.SetFaultKind(ctx, st.kube, tg.id, corev1.ResourceHealthStatusUnhealthy, "XID 48", sim.FaultTransient); err != nil {
			return err
		}
		if err := sim.WriteHealth(ctx, st.kube, tg.t, sim.CDIDeviceID(tg.id), corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
			return err
		}
	}
	for _, tg := range targets {
		if err := within(ctx, added(tg.id.TaintRuleName()), 2*time.Minute, tg.id.TaintRuleName()+" created"); err != nil {
			return err
		}
	}
	for _, tg := range targets { // as their migrations would move them
		if err := deletePod(ctx, st.kube, tg.t.Namespace, tg.t.Pod); err != nil {
			return err
		}
	}
	var out []time.Duration
	var total time.Duration
	for _, tg := range targets {
		select {
		case at := <-deleted(tg.id.TaintRuleName()):
			out = append(out, at.Sub(start))
			total += at.Sub(start)
		case <-time.After(20 * time.Minute):
			return fmt.Errorf("%s not back 20 min after the storm", tg.id)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	printLatency(o.Out, "storm: fault -> the device back (rule deleted)", out)
	fmt.Fprintf(o.Out, "[bench] the storm cost %.2f GPU-hours out of service (%d devices, the last back %s after the fault)\n",
		total.Hours(), len(out), slices.Max(out).Round(time.Second))
	return nil
}

// drawMix draws the classes of n faults from the mix's weights.
func drawMix(o CausesOptions, n int) []mixFault {
	r := rand.New(rand.NewPCG(o.Seed, 1))
	total := 0
	for _, c := range MixClasses {
		total += o.Mix[c]
	}
	out := make([]mixFault, n)
	for i := range out {
		k := r.IntN(total)
		for _, c := range MixClasses {
			if k < o.Mix[c] {
				out[i].class = c
				break
			}
			k -= o.Mix[c]
		}
	}
	return out
}

// runMixFault gives one device its fault the way its class's sources say it, and measures how
// long the GPU was out of service.
func runMixFault(ctx context.Context, st *stack, f *mixFault, added, deleted func(string) <-chan time.Time) error {
	kube, rule := st.kube, f.id.TaintRuleName()
	t := sim.Target{Namespace: "mix", Pod: f.pod, Container: "main", EntryName: "claim:" + sim.PodClaimName}
	start := time.Now()
	switch f.class {
	case "application":
		if err := sim.WriteHealth(ctx, kube, t, sim.CDIDeviceID(f.id), corev1.ResourceHealthStatusUnhealthy, "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Engine Exception"); err != nil {
			return err
		}
		v, err := waitView(ctx, st, f.id, func(v devicemsg.DeviceView) bool { return v.AppFaults > 0 })
		if err != nil {
			return err
		}
		if v.Quarantine != nil {
			return fmt.Errorf("an application's fault was fenced: %s", v.Quarantine.Reason)
		}
		f.first = "none"
		return nil
	case "replace":
		if err := sim.SetFaultKind(ctx, kube, f.id, corev1.ResourceHealthStatusUnhealthy, "row remap failure", sim.FaultPermanent); err != nil {
			return err
		}
		r := &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version,
			"kind": healthreport.Kind, "metadata": map[string]any{"name": "mix-" + f.pod},
			"spec": map[string]any{"node": f.id.Pool, "attribute": map[string]any{"name": sim.AttrUUID, "value": sim.UUID(f.id)},
				"health": "Unhealthy", "cause": map[string]any{"code": "row-remap-failure"}, "source": "dcgm"}}}
		if _, err := st.reports.Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return err
		}
		v, err := waitView(ctx, st, f.id, func(v devicemsg.DeviceView) bool { return v.State == devicemsg.Retired })
		if err != nil {
			return err
		}
		f.measured, f.first = time.Since(start), v.Quarantine.First
		return nil
	}
	xid, kind := "XID 48", sim.FaultTransient
	if f.class == "node" {
		xid, kind = "XID 79", sim.FaultReboot
	}
	if err := sim.SetFaultKind(ctx, kube, f.id, corev1.ResourceHealthStatusUnhealthy, xid, kind); err != nil {
		return err
	}
	if err := sim.WriteHealth(ctx, kube, t, sim.CDIDeviceID(f.id), corev1.ResourceHealthStatusUnhealthy, xid); err != nil {
		return err
	}
	if err := within(ctx, added(rule), time.Minute, rule+" created"); err != nil {
		return err
	}
	if err := deletePod(ctx, kube, "mix", f.pod); err != nil { // as the migration would move it
		return err
	}
	select {
	case at := <-deleted(rule):
		f.measured = at.Sub(start)
	case <-time.After(3 * time.Minute):
		return fmt.Errorf("not repaired after 3m")
	case <-ctx.Done():
		return ctx.Err()
	}
	// The record closes as the release activity answers, a moment after the rule is gone.
	v, err := waitView(ctx, st, f.id, func(v devicemsg.DeviceView) bool { return v.Quarantine == nil && len(v.Closed) > 0 })
	if err != nil {
		return err
	}
	f.first = v.Closed[len(v.Closed)-1].First
	if f.first == "" {
		return fmt.Errorf("the closed record keeps no first step: %+v", v.Closed[len(v.Closed)-1])
	}
	return nil
}

// waitView polls the device's view until ok, for up to a minute.
func waitView(ctx context.Context, st *stack, id device.ID, ok func(devicemsg.DeviceView) bool) (devicemsg.DeviceView, error) {
	end := time.Now().Add(time.Minute)
	for {
		v, err := api.QueryDevice(ctx, st.tc, id.WorkflowID(), "")
		if err == nil && ok(v) {
			return v, nil
		}
		if time.Now().After(end) {
			return v, fmt.Errorf("%s: not there after a minute (%v): %s", id, err, v.Summary)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reportMix prints, per class and in all, the GPU-hours out of service per 100 faults.
func reportMix(o CausesOptions, faults []mixFault) {
	type sum struct {
		n                    int
		device, node, spared time.Duration
		measured             time.Duration
		firsts               map[string]int
	}
	by := map[string]*sum{}
	var all sum
	whole := time.Duration(o.GPUsPerNode) * (o.Drain + o.Reboot)
	for _, f := range faults {
		s := by[f.class]
		if s == nil {
			s = &sum{firsts: map[string]int{}}
			by[f.class] = s
		}
		d := f.measured
		if f.first == string(policy.FirstNode) {
			d += time.Duration(o.GPUsPerNode) * o.Reboot // the faulty GPU and the node's others, while it reboots
		}
		for _, x := range []*sum{s, &all} {
			x.n++
			x.device += d
			x.node += whole
			if f.class != "application" {
				x.spared += whole // a node-level remediator that knows the catalogue's application faults
			}
			x.measured += f.measured
		}
		s.firsts[f.first]++
	}
	hours := func(d time.Duration, n int) string {
		return fmt.Sprintf("%.2f", d.Hours()*100/float64(max(n, 1)))
	}
	fmt.Fprintf(o.Out, "[bench] GPU-hours out of service per 100 faults (reboot %s, drain %s, %d GPUs a node; a replace fault's wait for new hardware is left out of both)\n",
		o.Reboot, o.Drain, o.GPUsPerNode)
	fmt.Fprintf(o.Out, "%-12s %6s %13s %11s %18s %14s  %s\n", "class", "faults", "device-level", "node-level", "node-level, apps", "measured mean", "first steps")
	fmt.Fprintf(o.Out, "%-12s %6s %13s %11s %18s %14s\n", "", "", "", "", "spared", "")
	for _, c := range MixClasses {
		s := by[c]
		if s == nil {
			continue
		}
		fmt.Fprintf(o.Out, "%-12s %6d %13s %11s %18s %14s  %v\n", c, s.n, hours(s.device, s.n), hours(s.node, s.n), hours(s.spared, s.n),
			(s.measured / time.Duration(s.n)).Round(time.Millisecond), s.firsts)
	}
	fmt.Fprintf(o.Out, "%-12s %6d %13s %11s %18s\n", "all", all.n, hours(all.device, all.n), hours(all.node, all.n), hours(all.spared, all.n))
}
