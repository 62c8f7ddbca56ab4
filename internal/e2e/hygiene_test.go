//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// TestClaimHygieneCleansALeakOnceAndWaitsForTheFence, on a stack of its own (it pauses the
// breaker). The real scheduler allocates two template claims on shared GPUs. Each leaks as a real
// one does: a cleanup script strips the claims' delete-protection finalizer, so kube-controller-
// manager cannot deallocate them, and the Pods are deleted with their dependents orphaned.
//   - The leak on a live node is found, recorded once, and held while the breaker is paused. The
//     controller is SIGKILLed there and a new one started; after the resume the claim is deleted
//     once (one DeleteLeakedClaim in all runs, one Event of each kind).
//   - The leak on a node that stopped renewing its Lease (its Pod force-deleted) is Unknown: it
//     stays through rechecks and a continue-as-new until `capacity fence`, then it is deleted.
func TestClaimHygieneCleansALeakOnceAndWaitsForTheFence(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s, dir := ownInfra(t, ctx)
	kube, tc := s.kube, s.temporal
	go func() { _ = (&sim.OwnedDrivers{Kube: kube, Logger: testLogger}).Run(ctx) }()
	nodes := sharedDRANodes(t, ctx, kube, "hyg", 2)
	if out, err := s.cli(ctx, "breaker", "pause", "--actor", "sre", "--reason", "claim hygiene test"); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	cfg := childConfig{Hygiene: &app.HygieneOptions{Interval: time.Second, Recheck: 2 * time.Second, RechecksPerRun: 3,
		Policy: capacity.HygienePolicy{LeakTimeout: 3 * time.Second, StuckTimeout: time.Hour, DeleteLeaked: true}}}
	first := startChildConfig(t, s, dir, "controller-1", cfg)

	live := leakClaim(t, ctx, kube, "hyg", "live", nodes[0], nil)
	held := waitHygiene(t, ctx, tc, live, "held by the paused breaker", func(st api.ClaimHygieneStatus) bool {
		return st.State == api.HygieneHeld && strings.Contains(st.Held, "claim hygiene test")
	})
	if !held.Finding.Deletable || len(held.Finding.ShareIDs) != 1 || held.Finding.Node != nodes[0] || held.Finding.Version == "" {
		t.Fatalf("held finding = %+v", held.Finding)
	}
	out, err := s.cli(ctx, "capacity", "hygiene")
	if err != nil || !strings.Contains(out, "hyg/"+live.Name+"  held") || !strings.Contains(out, held.Finding.ShareIDs[0]) || !strings.Contains(out, "claim hygiene test") {
		t.Fatalf("capacity hygiene while held: %v\n%s", err, out)
	}
	lost := leakClaim(t, ctx, kube, "hyg", "lost", nodes[1], func() { stopHeartbeat(t, ctx, kube, nodes[1]) })
	waitHygiene(t, ctx, tc, lost, "Unknown on the lost node", func(st api.ClaimHygieneStatus) bool {
		return st.State == capacity.FindingNodeLost
	})

	first.kill(t)
	startChildConfig(t, s, dir, "controller-2", cfg)
	if out, err := s.cli(ctx, "breaker", "resume", "--actor", "sre"); err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "leaked claim deleted", claimGone(ctx, kube, live))
	var st api.ClaimHygieneStatus
	if err := tc.GetWorkflow(ctx, api.ClaimHygieneID(string(live.UID)), "").Get(ctx, &st); err != nil || st.State != api.HygieneDeleted {
		t.Fatalf("live leak's workflow: %+v %v", st, err)
	}
	if n := activityCount(t, ctx, tc, api.ClaimHygieneID(string(live.UID)), "DeleteLeakedClaim"); n != 1 {
		t.Fatalf("DeleteLeakedClaim ran %d times over the runs, want once", n)
	}
	wantClaimEvents(t, ctx, kube, live, map[string]int{kubeobj.EventClaimLeaked: 1, kubeobj.EventLeakedClaimDeleted: 1})

	// The lost node's claim outlives rechecks and a continue-as-new: nothing is reclaimed on an
	// unfenced lost node.
	lostID := api.ClaimHygieneID(string(lost.UID))
	eventually(t, 90*time.Second, "lost-node claim followed into a second run", func() error {
		if runs := len(runIDs(t, ctx, tc, lostID)); runs < 2 {
			var st api.ClaimHygieneStatus
			qerr := queryInto(ctx, tc, lostID, &st)
			d, _ := tc.DescribeWorkflowExecution(ctx, lostID, "")
			return fmt.Errorf("%d runs (%s, history %d events; state %+v %v)", runs, d.GetWorkflowExecutionInfo().GetStatus(), d.GetWorkflowExecutionInfo().GetHistoryLength(), st, qerr)
		}
		return nil
	})
	if _, err := kube.ResourceV1().ResourceClaims("hyg").Get(ctx, lost.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("claim on the unfenced lost node: %v", err)
	}
	if n := activityCount(t, ctx, tc, lostID, "DeleteLeakedClaim"); n != 0 {
		t.Fatalf("DeleteLeakedClaim asked %d times on an unfenced lost node", n)
	}
	if out, err := s.kubeCLI(ctx, "capacity", "fence", nodes[1], "--actor", "sre"); err != nil {
		t.Fatalf("fence: %v\n%s", err, out)
	}
	eventually(t, time.Minute, "claim on the fenced node deleted", claimGone(ctx, kube, lost))
	wantClaimEvents(t, ctx, kube, lost, map[string]int{kubeobj.EventClaimUnknown: 1, kubeobj.EventClaimLeaked: 1, kubeobj.EventLeakedClaimDeleted: 1})
	eventually(t, 30*time.Second, "both listed as deleted", func() error {
		out, err := s.cli(ctx, "capacity", "hygiene", "--all", "-o", "json")
		if err != nil || strings.Count(out, `"state": "deleted"`) != 2 {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	recordHistory(t, ctx, tc, api.ClaimHygieneID(string(live.UID)), "claim_hygiene_deleted.json")
	recordRuns(t, ctx, tc, lostID, "claim_hygiene_fenced")
}

// leakClaim runs a Pod with a template claim on node and leaks its claim: the delete-protection
// finalizer stripped, then (after lose, when set, takes the node away) the Pod deleted at once
// with its dependents orphaned. It returns the claim once nothing reserves it.
func leakClaim(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, name, node string, lose func()) *resourcev1.ResourceClaim {
	t.Helper()
	pod := runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: name, Node: node, Template: true, Memory: "8Gi"})
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s claim statuses %+v", name, pod.Status.ResourceClaimStatuses)
	}
	claimName := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	if _, err := kube.ResourceV1().ResourceClaims(ns).Patch(ctx, claimName, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if lose != nil {
		lose()
	}
	orphan := metav1.DeletePropagationOrphan
	if err := kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	var leaked *resourcev1.ResourceClaim
	eventually(t, time.Minute, "claim "+claimName+" leaked", func() error {
		c, err := kube.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) != 0 || len(c.OwnerReferences) != 0 {
			return fmt.Errorf("allocated %v, reserved for %v, owners %v", c.Status.Allocation != nil, c.Status.ReservedFor, c.OwnerReferences)
		}
		leaked = c
		return nil
	})
	return leaked
}

func waitHygiene(t *testing.T, ctx context.Context, tc client.Client, c *resourcev1.ResourceClaim, what string, ok func(api.ClaimHygieneStatus) bool) api.ClaimHygieneStatus {
	t.Helper()
	var st api.ClaimHygieneStatus
	eventually(t, time.Minute, c.Name+" "+what, func() error {
		if err := queryInto(ctx, tc, api.ClaimHygieneID(string(c.UID)), &st); err != nil {
			return err
		}
		if !ok(st) {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	return st
}

func claimGone(ctx context.Context, kube kubernetes.Interface, c *resourcev1.ResourceClaim) func() error {
	return func() error {
		_, err := kube.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	}
}

// activityCount counts an activity's scheduled tasks over every run of a workflow.
func activityCount(t *testing.T, ctx context.Context, tc client.Client, workflowID, activity string) int {
	t.Helper()
	n := 0
	for _, run := range runIDs(t, ctx, tc, workflowID) {
		it := tc.GetWorkflowHistory(ctx, workflowID, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == activity {
				n++
			}
		}
	}
	return n
}

// wantClaimEvents checks the Events on a claim, by reason, and that each was written once.
func wantClaimEvents(t *testing.T, ctx context.Context, kube kubernetes.Interface, c *resourcev1.ResourceClaim, want map[string]int) {
	t.Helper()
	// The deletion's Event is written after the claim is gone: a look right then may not see it.
	eventually(t, 15*time.Second, "events on "+c.Name, func() error {
		evs, err := kube.CoreV1().Events(c.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(c.UID)})
		if err != nil {
			return err
		}
		got := map[string]int{}
		for _, e := range evs.Items {
			got[e.Reason] += int(e.Count)
			if e.Type == corev1.EventTypeWarning && !strings.Contains(e.Message, "shares ") {
				t.Errorf("event %s does not name the shares: %s", e.Reason, e.Message)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("events on %s: %v, want %v", c.Name, got, want)
		}
		return nil
	})
}
