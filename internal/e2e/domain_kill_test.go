//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// domainKillClass devices (on the nodes dom-kill-*) climb a ladder of one reset that moves the
// holders of its baseboard's other GPUs first.
const domainKillClass = "domain-kill.gpu.sim.devicewarden.io"

const domainKillPolicy = `
policies:
  - name: domain-kill
    match: {deviceClass: ` + domainKillClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    migration: {enabled: true, perNode: 1, clusterWide: 10, checkpointTimeout: 1m, readyTimeout: 2m, decisionTimeout: 5m}
    repair:
      steps:
        - {kind: reset, holders: move, image: ` + sim.ResetImage + `, command: [reset], timeout: 30s}
drivers:
  ` + sim.Driver + `: {identity: [` + sim.AttrNode + `, ` + sim.AttrIndex + `, ` + sim.AttrUUID + `], resetDomain: "attribute:` + sim.AttrBaseboard + `"}
`

// TestKilledWorkerMidDomainResetKeepsItsFences SIGKILLs the controller while a reset of GPU 0 of
// an 8-GPU baseboard moves a checkpointing Job off another GPU of the baseboard (holders: move):
// the reset's permit and its fences on the 7 other GPUs outlive the process. A Pod that asks for
// a fenced GPU after the restart waits; the next process finishes the move, runs the one reset
// and lifts the fences: the Job was suspended and resumed once, on the other baseboard, the
// device's one try passed, and the waiting Pod runs.
func TestKilledWorkerMidDomainResetKeepsItsFences(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	s, dir := ownInfra(t, ctx)
	kube := s.kube
	// The cluster's own parts run in this process, apart from the controllers: the kubelet and
	// driver that complete the reset, probe and canary Pods, and the workload's checkpoints.
	go func() { _ = (&sim.Kubelet{Kube: kube, Logger: testLogger}).Run(ctx) }()
	go func() { _ = (&sim.Checkpointer{Kube: kube, Poll: 100 * time.Millisecond, Logger: testLogger}).Run(ctx) }()
	const ns = "dom-kill"
	classOnNodes(t, ctx, kube, domainKillClass, ns+"-")
	nodes, err := sim.CreateBaseboardNodes(ctx, kube, ns, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	board := nodes[0]
	bad := device.ID{Driver: sim.Driver, Pool: board, Device: "gpu-0"}
	reporter := runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "reporter", Node: board, Index: ptr.To(0), DeviceClass: domainKillClass})
	job := sim.Workload{Namespace: ns, Name: "train", DeviceClass: domainKillClass}
	_, ids := runningJobOn(t, ctx, kube, job, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation, CheckpointDelay: 8 * time.Second})
	if ids[0].Pool != board || ids[0] == bad {
		t.Fatalf("the Job runs on %s, not on another GPU of %s", ids[0], board)
	}
	// A second baseboard, for the Job to move to.
	if nodes, err = sim.CreateBaseboardNodes(ctx, kube, ns, 2, 8); err != nil {
		t.Fatal(err)
	}
	first := startChildWith(t, s, dir, "controller-1", domainKillPolicy)
	faultAndQuarantine(t, ctx, s, bad, "XID 48", sim.FaultTransient)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, reporter.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	mid := anyMigrationIn(t, ctx, s, bad, migrationplan.PhaseCheckpointing)
	if n := domainFences(t, ctx, kube, board, bad); n != 7 {
		t.Fatalf("%d domain fences while the Job moves, want 7 (the baseboard's other GPUs)", n)
	}
	permitHeldBy(t, ctx, kube, bad, "")
	first.kill(t)

	// Dead: nothing lifts the fences. A Pod asking for GPU 5 of the baseboard waits.
	waiting := sim.Workload{Namespace: ns, Name: "newcomer", Node: board, Index: ptr.To(5), DeviceClass: domainKillClass}
	if _, err := waiting.Create(ctx, kube); err != nil {
		t.Fatal(err)
	}
	startChildWith(t, s, dir, "controller-2", domainKillPolicy)
	time.Sleep(3 * time.Second)
	if p, err := kube.CoreV1().Pods(ns).Get(ctx, "newcomer", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("a Pod took a fenced GPU of the baseboard while its reset was under way (%v)", err)
	}

	// A claim the moved Job leaves behind may outlast the step's settle wait on a loaded machine:
	// the try then waits a minute, fenced, and looks again.
	st := waitState(t, ctx, s, bad, 4*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if len(q.Ladder.Tries) != 1 || !q.Ladder.Tries[0].Result.Passed {
		t.Fatalf("tries %+v", q.Ladder.Tries)
	}
	movedOnce(t, ctx, s, ns, mid)
	pods, err := jobPods(ctx, kube, ns, "train")
	if err != nil || len(pods) != 1 || pods[0].Spec.NodeName != nodes[1] {
		t.Fatalf("the Job's Pods %d (%v): not moved to %s", len(pods), err, nodes[1])
	}
	if n := domainFences(t, ctx, kube, board, bad); n != 0 {
		t.Fatalf("%d domain fences outlived the reset", n)
	}
	permitHeldBy(t, ctx, kube, bad, "passed")
	eventually(t, time.Minute, "the newcomer on GPU 5 running", func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "newcomer", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("newcomer %v (%v)", p.Status.Phase, err)
		}
		return nil
	})
	t.Logf("time to repair, the controller killed while the baseboard's Job moved: %s", q.ClosedAt.Sub(q.CreatedAt).Round(time.Second))
}

// anyMigrationIn waits until one of the device's migrations is in phase and returns its workflow
// ID (the device's first migration is its own Pod's, the reporter's here).
func anyMigrationIn(t *testing.T, ctx context.Context, s *stack, id device.ID, phase migrationplan.MigrationPhase) string {
	t.Helper()
	var mid string
	eventually(t, time.Minute, "a migration in phase "+string(phase), func() error {
		st, err := stateOf(ctx, s, id)
		if err != nil {
			return err
		}
		var seen []string
		for _, m := range st.Migrations {
			var ms migrationplan.MigrationState
			if err := queryInto(ctx, s.temporal, m, &ms); err != nil {
				return err
			}
			if ms.Phase == phase {
				mid = m
				return nil
			}
			seen = append(seen, string(ms.Phase))
		}
		return fmt.Errorf("migrations in %v", seen)
	})
	return mid
}

// domainFences counts the domain fences on node that id's reset owns.
func domainFences(t *testing.T, ctx context.Context, kube kubernetes.Interface, node string, id device.ID) int {
	t.Helper()
	rules, err := kube.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(node)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules.Items {
		if r.Spec.Taint.Key == kubeobj.TaintDomainReset && r.Annotations[kubeobj.AnnotationWorkflow] == id.WorkflowID() {
			n++
		}
	}
	return n
}

// permitHeldBy checks that id's workflow holds its domain's reset permit (a Lease in
// DeviceWarden's namespace), with the outcome it records ("" while the reset is under way).
func permitHeldBy(t *testing.T, ctx context.Context, kube kubernetes.Interface, id device.ID, outcome string) {
	t.Helper()
	leases, err := kube.CoordinationV1().Leases(kubeobj.OwnNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, l := range leases.Items {
		if !strings.HasPrefix(l.Name, kubeobj.ResetPermitPrefix) {
			continue
		}
		found = append(found, l.Name)
		if ptr.Deref(l.Spec.HolderIdentity, "") == id.WorkflowID() && l.Annotations[kubeobj.AnnotationResetOutcome] == outcome {
			return
		}
	}
	t.Fatalf("no reset permit held by %s with outcome %q (permits %v)", id.WorkflowID(), outcome, found)
}
