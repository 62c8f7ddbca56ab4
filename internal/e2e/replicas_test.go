//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// replicaLadderClass devices climb a ladder of one reset; the storm's devices are of the
// simulator's default class, which the file leaves to the built-in policy (quarantined, no ladder).
const replicaLadderClass = "replicas.gpu.sim.devicewarden.io"

const replicaPolicy = `
policies:
  - name: replicas-ladder
    match: {deviceClass: ` + replicaLadderClass + `}
    stabilityWindow: 0s
    probe: {timeout: 30s}
    canary: {timeout: 30s}
    repair:
      steps:
        - {kind: reset, image: ` + sim.ResetImage + `, command: [reset], timeout: 2m}
drivers:
  ` + sim.Driver + `: {identity: [` + sim.AttrNode + `, ` + sim.AttrIndex + `, ` + sim.AttrUUID + `]}
`

// replica is one `devicewarden run` process of several against one Temporal.
type replica struct {
	*child
	identity string // its Lease identity
	metrics  string // its /readyz address
}

// workerOf says whether a Temporal worker identity is this process's (the SDK's default
// identity begins with the process ID).
func (r *replica) workerOf(identity string) bool {
	return strings.HasPrefix(identity, fmt.Sprintf("%d@", r.cmd.Process.Pid))
}

// TestThreeReplicasOnPostgres runs three `devicewarden run` processes, as a fleet deploys them,
// against the stock Temporal server on PostgreSQL (4 history shards, SQL visibility): one leads
// the watcher, all three poll for activities. The leader is SIGKILLed the moment the first rule
// of a storm is written (12 Unhealthy and 12 Unknown reports at once, 6 more Unknown while no
// replica leads); a follower takes the Lease over and every device is decided, each by one
// workflow run with the transitions its reports call for, each rule created once (the apiserver's
// audit log). Then a GPU's ladder resets it, and the replica running the reset's activity is
// SIGKILLed while the reset Pod runs: the activity's next attempt, on a replica still alive,
// adopts the Pod, and the GPU is released after one passed try, its reset Pod created once.
func TestThreeReplicasOnPostgres(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	s := startPostgresStack(t, ctx)
	kube := s.kube
	if err := app.InstallReportCRD(ctx, kube); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(s.dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(replicaPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := devicePods(t, ctx, kube, "replicas", 30)
	var reps []*replica
	for i := range 3 {
		r := &replica{identity: fmt.Sprintf("replica-%d", i), metrics: freeAddress(t)}
		r.child = startCLI(t, s.dir, r.identity, "run", "--kubeconfig", s.kubeconfig, "--temporal-address", s.frontend,
			"--policy", policyFile, "--metrics-address", r.metrics, "--console-listen", freeAddress(t),
			"--breaker-max-count", "1000", "--breaker-max-percent", "0",
			"--leader-elect", "--leader-elect-identity", r.identity, "--leader-elect-lease-duration", "4s",
			"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "1s", "--log-level", "warn")
		reps = append(reps, r)
	}
	leader := leaderOf(t, ctx, kube, reps)
	eventually(t, 2*time.Minute, "one leader and two followers ready, all three polling for activities", func() error {
		for _, r := range reps {
			want := "ok: follower"
			if r == leader {
				want = "ok"
			}
			if err := expectReady(r.metrics, want); err != nil {
				return fmt.Errorf("%s: %w", r.identity, err)
			}
		}
		return activityPollers(ctx, s.stack, reps)
	})
	t.Logf("stack on PostgreSQL and three replicas up in %s, %s leads", time.Since(start).Round(time.Millisecond), leader.identity)

	// The storm: 12 Unknown and 12 Unhealthy reports at once; the leader dies as the first rule
	// appears.
	wait := stormToFirstRule(t, ctx, kube, ids[:24], 12)
	leader.kill(t)
	killed := time.Now()
	wait()
	written := ruled(ctx, kube, ids[12:24])
	setHealth(t, ctx, kube, ids[24:], corev1.ResourceHealthStatusUnknown) // while the Lease is the dead leader's
	alive := without(reps, leader)
	next := leaderOf(t, ctx, kube, alive)
	t.Logf("leader killed with %d of 12 rules written; %s leads %s later", written, next.identity, time.Since(killed).Round(time.Millisecond))

	eventually(t, 2*time.Minute, "every device of the storm decided", func() error {
		for i, id := range ids {
			st, err := stateOf(ctx, s.stack, id)
			if err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			want := decide.Suspect
			if i >= 12 && i < 24 {
				want = decide.Quarantined
			}
			if st.State != want || len(st.Transitions) != 1 {
				return fmt.Errorf("%s: state %s with %d transitions, want %s with 1", id, st.State, len(st.Transitions), want)
			}
		}
		return nil
	})
	t.Logf("the storm's 30 devices decided %s after the leader was killed", time.Since(killed).Round(time.Millisecond))
	for _, id := range ids {
		if n, err := runs(ctx, s.stack, id); err != nil || n != 1 {
			t.Fatalf("%s: %d workflow runs (%v), want 1", id, n, err)
		}
	}
	expectCreatedOnce(t, s.stack, ruleNames(ids[12:24]))

	// The ladder: a reset whose replica dies while the reset Pod runs. No kubelet completes the
	// Pod until then.
	resets := watchResetPods(t, ctx, kube)
	if err := sim.EnsureClass(ctx, kube, replicaLadderClass); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, kube, "replicas-ladder", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "replicas-ladder"
	runningPod(t, ctx, kube, sim.Workload{Namespace: ns, Name: "failing", Node: nodes[0], Index: ptr.To(1), DeviceClass: replicaLadderClass})
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-1"}
	faultAndQuarantine(t, ctx, s.stack, bad, "XID 48", sim.FaultTransient)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "failing", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	worker := resetRunningOn(t, ctx, s.stack, bad, alive, resets)
	worker.kill(t)
	t.Logf("killed %s, the replica running the reset", worker.identity)
	go func() { _ = (&sim.Kubelet{Kube: kube, Logger: testLogger}).Run(ctx) }()
	st := waitState(t, ctx, s.stack, bad, 3*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	q := st.Closed[len(st.Closed)-1]
	if q.Ladder == nil || len(q.Ladder.Tries) != 1 || !q.Ladder.Tries[0].Result.Passed {
		t.Fatalf("ladder %+v", q.Ladder)
	}
	if names := resets.created(); len(names) != 1 || names[0].count != 1 {
		t.Fatalf("reset Pods created %v, want one, once", names)
	}
	attempt, identity := resetAttempt(t, ctx, s.stack, bad)
	if attempt < 2 || worker.workerOf(identity) {
		t.Fatalf("the reset's activity finished on attempt %d by %s: the kill of %s did not cut it", attempt, identity, worker.identity)
	}
	t.Logf("released %s after the quarantine; the reset's activity finished on attempt %d", q.ClosedAt.Sub(q.CreatedAt).Round(time.Second), attempt)
}

// leaderOf waits until one of reps holds the watcher's Lease, and returns it.
func leaderOf(t *testing.T, ctx context.Context, kube kubernetes.Interface, reps []*replica) *replica {
	t.Helper()
	var leader *replica
	eventually(t, time.Minute, "a replica holding the watcher's Lease", func() error {
		l, err := kube.CoordinationV1().Leases("default").Get(ctx, "devicewarden-watcher", metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		for _, r := range reps {
			if r.identity == holder {
				leader = r
				return nil
			}
		}
		return fmt.Errorf("held by %q", holder)
	})
	return leader
}

func without(reps []*replica, gone *replica) []*replica {
	var out []*replica
	for _, r := range reps {
		if r != gone {
			out = append(out, r)
		}
	}
	return out
}

// activityPollers checks that every replica polls DeviceWarden's task queue for activities.
func activityPollers(ctx context.Context, s *stack, reps []*replica) error {
	resp, err := s.temporal.DescribeTaskQueue(ctx, api.TaskQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return err
	}
	for _, r := range reps {
		polling := false
		for _, p := range resp.GetPollers() {
			polling = polling || r.workerOf(p.GetIdentity())
		}
		if !polling {
			return fmt.Errorf("%s (pid %d) does not poll for activities", r.identity, r.cmd.Process.Pid)
		}
	}
	return nil
}

// resetRunningOn waits until the device's reset Pod runs and its activity is started on one of
// reps, and returns that replica.
func resetRunningOn(t *testing.T, ctx context.Context, s *stack, id device.ID, reps []*replica, resets *podCreations) *replica {
	t.Helper()
	var on *replica
	eventually(t, 2*time.Minute, "the reset running on a replica", func() error {
		if len(resets.created()) == 0 {
			return fmt.Errorf("no reset Pod yet")
		}
		desc, err := s.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), "")
		if err != nil {
			return err
		}
		for _, a := range desc.GetPendingActivities() {
			if a.GetActivityType().GetName() != "RunCheck" || a.GetState() != enumspb.PENDING_ACTIVITY_STATE_STARTED {
				continue
			}
			for _, r := range reps {
				if r.workerOf(a.GetLastWorkerIdentity()) {
					on = r
					return nil
				}
			}
			return fmt.Errorf("RunCheck started by %q, none of the replicas", a.GetLastWorkerIdentity())
		}
		return fmt.Errorf("no RunCheck started among %d pending activities", len(desc.GetPendingActivities()))
	})
	return on
}

// resetAttempt is the attempt, and the worker, that finished the device's first RunCheck (its
// reset): the history records an activity's started event once, for the attempt that ended it.
func resetAttempt(t *testing.T, ctx context.Context, s *stack, id device.ID) (int32, string) {
	t.Helper()
	it := s.temporal.GetWorkflowHistory(ctx, id.WorkflowID(), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	checks := map[int64]bool{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "RunCheck" {
			checks[ev.GetEventId()] = true
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && checks[a.GetScheduledEventId()] {
			return a.GetAttempt(), a.GetIdentity()
		}
	}
	t.Fatal("no RunCheck started in the history")
	return 0, ""
}

// podCreations counts, from a watch of every namespace, the reset Pods created.
type podCreations struct {
	mu    sync.Mutex
	names map[string]int
}

type podCount struct {
	name  string
	count int
}

func (p *podCreations) created() []podCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []podCount
	for n, c := range p.names {
		out = append(out, podCount{n, c})
	}
	return out
}

// watchResetPods watches Pods from now on and counts each reset Pod's creations (ADDED events of
// a Pod running the simulated reset tool).
func watchResetPods(t *testing.T, ctx context.Context, kube kubernetes.Interface) *podCreations {
	t.Helper()
	w, err := kube.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	p := &podCreations{names: map[string]int{}}
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Added {
				continue
			}
			for _, c := range pod.Spec.Containers {
				if c.Image == sim.ResetImage {
					p.mu.Lock()
					p.names[pod.Namespace+"/"+pod.Name]++
					p.mu.Unlock()
				}
			}
		}
	}()
	return p
}
