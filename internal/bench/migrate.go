package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// MigrateOptions configures the migration benchmark.
type MigrateOptions struct {
	Workloads int
	CacheDir  string
	Out       io.Writer
}

// Migrate measures checkpoint-migrate end to end on a fresh stack: one checkpointing Job per node
// (the simulated workload answers at once), every Job's device turns Unhealthy at the same moment,
// and each Job is timed from its status write until a new Pod of it is Ready on another device.
// Then it reads the migrations' histories for what one costs the embedded Temporal.
func Migrate(ctx context.Context, o MigrateOptions) error {
	pols, err := policy.Parse([]byte(fmt.Sprintf("default:\n  migration: {enabled: true, perNode: 1, clusterWide: %d}\n", o.Workloads)))
	if err != nil {
		return err
	}
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{Policies: pols},
		func(kube kubernetes.Interface, opts *app.ControllerOptions) {
			opts.Extra = append(opts.Extra, (&sim.Checkpointer{Kube: kube, Poll: 50 * time.Millisecond}).Run)
		})
	if err != nil {
		return err
	}
	defer st.stop()
	kube, tc := st.kube, st.tc
	nodes, err := sim.CreateNodes(ctx, kube, "mig", o.Workloads, 2)
	if err != nil {
		return err
	}
	if err := sim.EnsureNamespace(ctx, kube, "bench"); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "[bench] starting %d checkpointing Jobs, one per node\n", o.Workloads)
	for i, n := range nodes {
		w := sim.Workload{Namespace: "bench", Name: fmt.Sprintf("train-%d", i), Node: n}
		if _, err := w.CreateJob(ctx, kube, sim.JobOptions{Checkpoint: kubeobj.CheckpointAnnotation}); err != nil {
			return err
		}
	}
	first := map[string]jobStart{} // job -> its first Pod and device
	if err := waitUntil(ctx, 3*time.Minute, func() (bool, error) {
		pods, err := kube.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			job := p.Labels["batch.kubernetes.io/job-name"]
			if _, ok := first[job]; ok || p.Status.Phase != corev1.PodRunning || len(p.Status.ResourceClaimStatuses) == 0 {
				continue
			}
			c, err := kube.ResourceV1().ResourceClaims("bench").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			if err != nil || c.Status.Allocation == nil {
				continue
			}
			r := c.Status.Allocation.Devices.Results[0]
			first[job] = jobStart{uid: string(p.UID), id: device.ID{Driver: r.Driver, Pool: r.Pool, Device: r.Device}}
		}
		return len(first) == o.Workloads, nil
	}); err != nil {
		return fmt.Errorf("jobs not running: %w", err)
	}
	ready, stop, err := watchReady(ctx, kube, first)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(o.Out, "[bench] %d devices turn Unhealthy at once\n", o.Workloads)
	start := time.Now()
	for _, f := range first {
		if _, err := sim.SetHealth(ctx, kube, f.id, corev1.ResourceHealthStatusUnhealthy, "bench"); err != nil {
			return err
		}
	}
	var lat []time.Duration
	for job := range first {
		select {
		case at := <-ready(job):
			lat = append(lat, at.Sub(start))
		case <-time.After(5 * time.Minute):
			return fmt.Errorf("job %s not Ready elsewhere after 5m", job)
		}
	}
	printLatency(o.Out, fmt.Sprintf("%d devices Unhealthy at once -> each Job Ready on another device (checkpoint, suspend, resume, schedule)", o.Workloads), lat)
	if err := migrationCost(ctx, tc, first, o.Out); err != nil {
		return err
	}
	return suspendFloor(ctx, kube, min(10, o.Workloads), o.Out)
}

// suspendFloor times what Kubernetes alone takes for the same move, one Job at a time, with no
// DeviceWarden in it: suspend, wait until its Pods are gone, resume, wait for a new Ready Pod.
func suspendFloor(ctx context.Context, kube kubernetes.Interface, n int, out io.Writer) error {
	var lat []time.Duration
	for i := range n {
		job := fmt.Sprintf("train-%d", i)
		pods, err := kube.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
		if err != nil {
			return err
		}
		old := map[string]bool{}
		for _, p := range pods.Items {
			old[string(p.UID)] = true
		}
		start := time.Now()
		for _, suspend := range []bool{true, false} {
			patch := []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend))
			if _, err := kube.BatchV1().Jobs("bench").Patch(ctx, job, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
				return err
			}
			if !suspend {
				break
			}
			if err := waitUntil(ctx, time.Minute, func() (bool, error) {
				pods, err := kube.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
				for _, p := range pods.Items {
					if old[string(p.UID)] {
						return false, err
					}
				}
				return err == nil, err
			}); err != nil {
				return err
			}
		}
		if err := waitUntil(ctx, time.Minute, func() (bool, error) {
			pods, err := kube.CoreV1().Pods("bench").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
			for _, p := range pods.Items {
				if !old[string(p.UID)] && kubeobj.PodReady(&p) {
					return true, err
				}
			}
			return false, err
		}); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	printLatency(out, "floor, Kubernetes alone: suspend -> Pods gone -> resume -> new Pod Ready, one Job at a time", lat)
	return nil
}

type jobStart struct {
	uid string
	id  device.ID
}

// watchReady reports, per Job, when a Pod of it other than its first became Ready.
func watchReady(ctx context.Context, kube kubernetes.Interface, first map[string]jobStart) (func(string) <-chan time.Time, func(), error) {
	w, err := kube.CoreV1().Pods("bench").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	chans := map[string]chan time.Time{}
	get := func(job string) chan time.Time {
		mu.Lock()
		defer mu.Unlock()
		if chans[job] == nil {
			chans[job] = make(chan time.Time, 1)
		}
		return chans[job]
	}
	seen := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			job := p.Labels["batch.kubernetes.io/job-name"]
			if seen[job] || string(p.UID) == first[job].uid || !kubeobj.PodReady(p) {
				continue
			}
			seen[job] = true
			get(job) <- time.Now()
		}
	}()
	return func(job string) <-chan time.Time { return get(job) }, w.Stop, nil
}

// migrationCost reads every migration's history, and the limiter's, for the workflow tasks and
// events one migration costs.
func migrationCost(ctx context.Context, tc client.Client, first map[string]jobStart, out io.Writer) error {
	var tasks, events, n int
	var slowest time.Duration
	var slow migrationplan.MigrationState
	for _, f := range first {
		st, err := api.QueryDevice(ctx, tc, f.id.WorkflowID(), "")
		if err != nil {
			return err
		}
		for _, id := range st.Migrations {
			t, e, err := historyCost(ctx, tc, id)
			if err != nil {
				return err
			}
			tasks, events, n = tasks+t, events+e, n+1
			var m migrationplan.MigrationState
			if err := tc.GetWorkflow(ctx, id, "").Get(ctx, &m); err != nil {
				return err
			}
			if len(m.Steps) > 1 {
				if d := m.Steps[len(m.Steps)-1].At.Sub(m.Steps[0].At); d > slowest {
					slowest, slow = d, m
				}
			}
		}
	}
	lt, le, err := historyCost(ctx, tc, api.MigrationLimiterID)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no migration found")
	}
	fmt.Fprintf(out, "per migration: %.1f workflow tasks and %.1f history events in MigrateWorkflow, plus %.1f tasks and %.1f events of the limiter (%d migrations)\n",
		float64(tasks)/float64(n), float64(events)/float64(n), float64(lt)/float64(n), float64(le)/float64(n), n)
	fmt.Fprintf(out, "the slowest migration's steps (%s):\n", slowest.Round(time.Millisecond))
	for _, st := range slow.Steps {
		fmt.Fprintf(out, "  +%-8s %s\n", st.At.Sub(slow.Steps[0].At).Round(time.Millisecond), st.What)
	}
	return nil
}

func historyCost(ctx context.Context, tc client.Client, id string) (tasks, events int, err error) {
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, 0, fmt.Errorf("history of %s: %w", id, err)
		}
		events++
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			tasks++
		}
	}
	return tasks, events, nil
}
