//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// unitRules are the forms of a unit that DeviceTaintRules fence now, with their taint keys.
func unitRules(ctx context.Context, kube kubernetes.Interface, unit device.ID) (map[string]string, error) {
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range rules.Items {
		if r.Annotations[kubeobj.AnnotationUnit] == unit.String() && r.DeletionTimestamp == nil {
			out[*r.Spec.DeviceSelector.Device] = r.Spec.Taint.Key
		}
	}
	return out, nil
}

// unschedulable waits for a Pod the scheduler cannot place.
func unschedulable(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	eventually(t, time.Minute, name+" unschedulable", func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("%s was scheduled to %s", name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", p.Status.Conditions)
	})
}

// Two partitions of gpu-0 report Unhealthy: every form of gpu-0 is fenced by one decision on one
// breaker permit; all three of gpu-0's workloads (one silent) are moved after their evidence is
// kept; the scheduler refuses every form of gpu-0 while gpu-1's partitions still allocate; a
// profile published during the quarantine is fenced too; the probe proves the whole gpu-0; and
// the release lifts every form's rule together.
func TestPartitionedGPUIsFencedAsAUnit(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := shared.kube
	if err := sim.EnsureClass(ctx, kube, unitClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreatePartitionedNodes(ctx, kube, "unit", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ns, node := "unit", nodes[0]
	unit := device.ID{Driver: sim.Driver, Pool: node, Device: device.CounterSetsKey + sim.CounterSetName(0)}

	// What the probes and canaries on this node were allocated.
	var allocs recorder
	for _, checkNS := range []string{policy.DefaultProbeNamespace, policy.DefaultCanaryNamespace} {
		if err := sim.EnsureNamespace(ctx, kube, checkNS); err != nil {
			t.Fatal(err)
		}
		cw, err := kube.ResourceV1().ResourceClaims(checkNS).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		watchInto(ctx, cw, func(ev watch.Event) {
			if c, ok := ev.Object.(*resourcev1.ResourceClaim); ok && c.Status.Allocation != nil {
				for _, r := range c.Status.Allocation.Devices.Results {
					if r.Pool == node {
						allocs.add(c.Labels[kubeobj.LabelRole] + " " + r.Device)
					}
				}
			}
		})
	}

	part := func(name string, gpu int, profile string) sim.Workload {
		return sim.Workload{Namespace: ns, Name: name, Node: node, Index: ptr.To(gpu), Profile: profile, DeviceClass: unitClass, Template: true}
	}
	holders := map[string]device.ID{}
	for _, w := range []sim.Workload{part("small-0", 0, "1g.10gb"), part("other-0", 0, "1g.10gb"), part("large-0", 0, "3g.40gb"), part("small-1", 1, "1g.10gb")} {
		p := runningPod(t, ctx, kube, w)
		id, err := podDevice(ctx, kube, *p)
		if err != nil {
			t.Fatal(err)
		}
		holders[w.Name] = id
	}
	bad := holders["small-0"]
	if err := sim.SetFault(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	// Two partitions' Pods report at once; large-0's Pod says nothing.
	for _, d := range []device.ID{bad, holders["other-0"]} {
		if _, err := sim.SetHealth(ctx, kube, d, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
			t.Fatal(err)
		}
	}

	// One decision for the physical GPU: its workflow is the unit's, every form is fenced.
	st := waitState(t, ctx, shared, unit, time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Quarantined })
	if st.Unit == nil || st.Unit.Whole != "gpu-0" || len(st.Unit.Devices) != sim.FormsPerGPU {
		t.Fatalf("unit %+v: want gpu-0's %d forms", st.Unit, sim.FormsPerGPU)
	}
	eventually(t, 30*time.Second, "every form of gpu-0 fenced", func() error {
		rules, err := unitRules(ctx, kube, unit)
		if err != nil {
			return err
		}
		for _, d := range st.Unit.Devices {
			if rules[d] != decide.TaintQuarantine {
				return fmt.Errorf("%s not fenced: %v", d, rules)
			}
		}
		return nil
	})
	if _, err := stateOf(ctx, shared, bad); err == nil {
		t.Fatalf("a workflow of its own for the partition %s", bad)
	}
	// The reporter's Event names the physical device and its forms.
	eventually(t, 30*time.Second, "an Event naming the physical device", func() error {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=small-0"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "DeviceQuarantined" && strings.Contains(e.Message, "physical device "+unit.String()+" (10 forms") {
				return nil
			}
		}
		return fmt.Errorf("events %d", len(evs.Items))
	})
	// One grant for the unit. A permit a worker spent from its lease is a grant once the worker
	// reports it (within seconds), so wait for that.
	eventually(t, 30*time.Second, "one breaker grant for the unit", func() error {
		br, err := breakerState(ctx, shared.temporal)
		if err != nil {
			return err
		}
		var grants []string
		for _, g := range br.Grants {
			if strings.Contains(g.Device, "/"+node+"/") {
				grants = append(grants, g.Device)
			}
		}
		if !slices.Equal(grants, []string{unit.String()}) {
			return fmt.Errorf("breaker grants on %s: %v, want one for the unit", node, grants)
		}
		return nil
	})

	// The operator sees the unit from any of its forms, and one line for it in the list.
	eventually(t, 30*time.Second, "device show on a partition shows its unit", func() error {
		out, err := shared.cli(ctx, "device", "show", bad.String())
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		for _, want := range []string{"Physical unit:", unit.String(), "whole device gpu-0", "small-0", "on " + bad.Device, "large-0"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in\n%s", want, out)
			}
		}
		return nil
	})
	// The stock temporal CLI finds the unit by any of its forms, as docs/policy-and-recovery.md says.
	eventually(t, 30*time.Second, "temporal workflow list by a form", func() error {
		out, err := temporalCLI(t, ctx, "workflow", "list", "--query", fmt.Sprintf("DeviceForms = '%s'", bad))
		if err != nil || !strings.Contains(out, unit.WorkflowID()) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	out, err := shared.cli(ctx, "device", "list")
	if err != nil {
		t.Fatalf("device list: %v (%s)", err, out)
	}
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "/"+node+"/") {
			rows = append(rows, strings.Join(strings.Fields(line)[:3], " "))
		}
	}
	if want := unit.String() + " " + fmt.Sprint(sim.FormsPerGPU) + " Quarantined"; !slices.Equal(rows, []string{want}) {
		t.Fatalf("device list rows of %s: %q, want %q\n%s", node, rows, want, out)
	}

	// Each of gpu-0's workloads gets a migration, the one whose Pod reported nothing included;
	// bare Pods keep their evidence and wait for a person, who moves them.
	st = waitState(t, ctx, shared, unit, 30*time.Second, func(st decide.DeviceState) bool { return len(st.Migrations) == 3 })
	var moved []string
	for _, mid := range st.Migrations {
		var ms migrationplan.MigrationState
		eventually(t, 30*time.Second, "migration "+mid+" waiting for a decision", func() error {
			var err error
			if ms, err = migrationState(ctx, mid); err != nil || ms.Phase != migrationplan.PhaseWaitingForDecision || ms.Evidence == "" {
				return fmt.Errorf("migration %s, evidence %q (%v)", ms.Phase, ms.Evidence, err)
			}
			return nil
		})
		if out, err := shared.cli(ctx, "migration", api.UpdateMigrateAnyway, mid, "--actor", "alice", "--reason", "e2e"); err != nil {
			t.Fatalf("migrate-anyway: %v (%s)", err, out)
		}
		res := migrationResult(t, ctx, mid)
		if res.Outcome != migrationplan.OutcomeMigrated || len(res.Moved) != 1 {
			t.Fatalf("migration %s: %+v", mid, res)
		}
		moved = append(moved, res.Moved[0][strings.LastIndex(res.Moved[0], "/")+1:])
	}
	slices.Sort(moved)
	if !slices.Equal(moved, []string{"large-0", "other-0", "small-0"}) {
		t.Fatalf("moved %v, want all three of gpu-0's workloads", moved)
	}
	for _, name := range moved {
		eventually(t, 30*time.Second, name+" gone from gpu-0", func() error {
			if _, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
	}

	// gpu-0's counters are free now; only the fence keeps new claims off every form of it.
	for _, w := range []sim.Workload{part("new-whole-0", 0, sim.ProfileWhole), part("new-small-0", 0, "1g.10gb")} {
		if _, err := w.Create(ctx, kube); err != nil {
			t.Fatal(err)
		}
		unschedulable(t, ctx, kube, ns, w.Name)
	}
	runningPod(t, ctx, kube, part("new-small-1", 1, "1g.10gb"))
	for _, name := range []string{"new-whole-0", "new-small-0", "new-small-1", "small-1"} {
		if err := kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}

	// A reconfiguration publishes a new profile of gpu-0 while it is quarantined: it is fenced too.
	const added = "gpu-0-mig-2g-20gb-0"
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		s, err := kube.ResourceV1().ResourceSlices().Get(ctx, sim.SliceName(node), metav1.GetOptions{})
		if err != nil {
			return err
		}
		d := s.Spec.Devices[1].DeepCopy() // a partition of gpu-0
		d.Name = added
		d.Attributes[sim.AttrUUID] = resourcev1.DeviceAttribute{StringValue: ptr.To(sim.UUID(device.ID{Driver: sim.Driver, Pool: node, Device: added}))}
		d.Attributes[sim.AttrProfile] = resourcev1.DeviceAttribute{StringValue: ptr.To("2g.20gb")}
		d.ConsumesCounters[0].Counters["slices"] = resourcev1.Counter{Value: *resource.NewQuantity(2, resource.DecimalSI)}
		d.ConsumesCounters[0].Counters["memory"] = resourcev1.Counter{Value: resource.MustParse("20Gi")}
		s.Spec.Devices = append(s.Spec.Devices, *d)
		_, err = kube.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new profile fenced", func() error {
		rules, err := unitRules(ctx, kube, unit)
		if err != nil {
			return err
		}
		if rules[added] == "" {
			st, _ := stateOf(ctx, shared, unit)
			return fmt.Errorf("%s not fenced: %v; state %s unit %+v transitions %+v", added, rules, st.State, st.Unit, st.Transitions)
		}
		return nil
	})

	// The probe on the broken GPU fails; fixed, the next review proves the whole gpu-0 and the
	// release lifts every form's rule at once.
	st = waitState(t, ctx, shared, unit, time.Minute, func(st decide.DeviceState) bool { return st.LastProbe != nil })
	if st.LastProbe.Passed || st.State != decide.Quarantined {
		t.Fatalf("probe of the broken GPU: %+v, state %s", st.LastProbe, st.State)
	}
	if err := sim.SetFault(ctx, kube, device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-0"}, corev1.ResourceHealthStatusHealthy, ""); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, ctx, shared, unit, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	if rules, err := unitRules(ctx, kube, unit); err != nil || len(rules) != 0 {
		t.Fatalf("rules after the release: %v (%v)", rules, err)
	}
	if len(st.Closed) != 1 || !slices.Contains(st.Unit.Devices, added) {
		t.Fatalf("closed %+v, unit %+v", st.Closed, st.Unit)
	}
	if got := allocs.all(); !slices.Equal(got, []string{"probe gpu-0", "canary gpu-0"}) {
		t.Fatalf("check allocations %v, want probes then a canary on the whole gpu-0", got)
	}
	recordHistory(t, ctx, shared.temporal, unit.WorkflowID(), "device_unit_release.json")
}

// An operator quarantining one partition of a GPU that has no workflow yet quarantines the GPU:
// the command reads the pool's slices, starts the unit's workflow with its devices, and every form
// is fenced; a release named by another form goes to the same workflow.
func TestForceQuarantineOfAPartitionFencesItsGPU(t *testing.T) {
	besideOthers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreatePartitionedNodes(ctx, kube, "unit-force", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	node := nodes[0]
	part := device.ID{Driver: sim.Driver, Pool: node, Device: sim.PartitionName(1, "3g.40gb", 1)}
	unit := device.ID{Driver: sim.Driver, Pool: node, Device: device.CounterSetsKey + sim.CounterSetName(1)}
	// A closed run of the partition's own (a standalone run that ended in service) is not where
	// its commands go once its unit runs (#40, defect 4: deciderOf took any run, closed or not).
	closed, err := shared.temporal.SignalWithStartWorkflow(ctx, part.WorkflowID(), api.SignalObservation,
		decide.Observation{Device: part, Node: node, Health: device.Healthy, StatusVersion: "1", ObservedAt: time.Now()},
		client.StartWorkflowOptions{ID: part.WorkflowID(), TaskQueue: api.TaskQueue}, api.DeviceWorkflow,
		api.DeviceInput{Device: part, Node: node, Policy: policy.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Get(ctx, nil); err != nil {
		t.Fatalf("the partition's own run: %v", err)
	}
	out, err := runCLI(ctx, "device", "quarantine", part.String(), "--actor", "alice", "--reason", "XID 79 seen by hand",
		"--temporal-address", shared.frontend, "--kubeconfig", shared.kubeconfig)
	if err != nil || !strings.Contains(out, "one of 10 forms of "+unit.String()) || !strings.Contains(out, "Quarantined") {
		t.Fatalf("device quarantine %s: %v\n%s", part, err, out)
	}
	eventually(t, 30*time.Second, "every form of gpu-1 fenced", func() error {
		rules, err := unitRules(ctx, kube, unit)
		if err != nil {
			return err
		}
		if len(rules) != sim.FormsPerGPU {
			return fmt.Errorf("%d forms fenced: %v", len(rules), rules)
		}
		return nil
	})
	if d, err := shared.temporal.DescribeWorkflowExecution(ctx, part.WorkflowID(), ""); err != nil ||
		d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the partition %s has a running workflow of its own (%v)", part, err)
	}
	if out, err := shared.cli(ctx, "device", "extend", part.String(), "--actor", "alice", "--duration", "1h"); err != nil || !strings.Contains(out, unit.String()) {
		t.Fatalf("extend by the partition's name, its own run closed: %v\n%s", err, out)
	}
	other := device.ID{Driver: sim.Driver, Pool: node, Device: "gpu-1"}
	if out, err := shared.cli(ctx, "device", "extend", other.String(), "--actor", "alice", "--duration", "1h"); err != nil || !strings.Contains(out, unit.String()) {
		t.Fatalf("extend by the whole device's name: %v\n%s", err, out)
	}
}
