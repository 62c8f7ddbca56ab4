package migration

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/activity"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// MigrationLimiter reaches the one migration-limiter workflow. package api implements it
// with signal-with-start, so the first request also starts the limiter.
type MigrationLimiter interface {
	Acquire(ctx context.Context, req migrationplan.SlotRequest) error
	Release(ctx context.Context, id string) error
}

// RequestMigrationSlot queues the migration at the limiter; the limiter signals it once a slot is free.
func (a *Activities) RequestMigrationSlot(ctx context.Context, req migrationplan.SlotRequest) error {
	if a.Limiter == nil {
		return fmt.Errorf("no migration limiter configured")
	}
	return a.Limiter.Acquire(ctx, req)
}

// ReleaseMigrationSlot frees the migration's slot (or its place in the queue).
func (a *Activities) ReleaseMigrationSlot(ctx context.Context, id string) error {
	if a.Limiter == nil {
		return fmt.Errorf("no migration limiter configured")
	}
	return a.Limiter.Release(ctx, id)
}

// poll is how often the waiting activities look again (default 250 ms: a wait adds at most that).
func (a *Activities) poll() time.Duration {
	if a.MigratePoll > 0 {
		return a.MigratePoll
	}
	return 250 * time.Millisecond
}

// WaitCheckpoint waits, heartbeating, until every Pod answered the checkpoint request (or is gone);
// the workflow bounds it with its own timer.
func (a *Activities) WaitCheckpoint(ctx context.Context, in CheckpointInput) (CheckpointStatus, error) {
	for {
		st, err := a.CheckpointDone(ctx, in)
		if err == nil && (st.Done || len(st.Gone) == len(in.Pods)) {
			return st, nil
		}
		if err != nil {
			activity.GetLogger(ctx).Warn("checkpoint not read", "error", err)
		}
		activity.RecordHeartbeat(ctx, st.Waiting)
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(a.poll()):
		}
	}
}

// PodInfo names one Pod of a workload.
type PodInfo struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	Node string `json:"node,omitempty"`
}

// WorkloadPods lists the workload's Pods that exist now (its top owner is the workload).
func (a *Activities) WorkloadPods(ctx context.Context, w api.Workload) ([]PodInfo, error) {
	pods, err := a.workloadPods(ctx, w)
	if err != nil {
		return nil, err
	}
	out := make([]PodInfo, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodInfo{Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName})
	}
	return out, nil
}

// workloadPods lists the workload's Pods, sorted by name.
func (a *Activities) workloadPods(ctx context.Context, w api.Workload) ([]corev1.Pod, error) {
	pods, err := a.Kube.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
	}
	var out []corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if string(p.UID) != w.UID {
			top, err := a.ownerOf(ctx, p)
			if apierrors.IsNotFound(err) || (err == nil && top.UID != w.UID) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// WaitGoneInput names Pods (by UID) to wait for.
type WaitGoneInput struct {
	Namespace string    `json:"namespace"`
	Pods      []PodInfo `json:"pods"`
}

// WaitPodsGone waits, heartbeating, until none of the Pods exists any more (a newer Pod of the same
// name does not count).
func (a *Activities) WaitPodsGone(ctx context.Context, in WaitGoneInput) error {
	for {
		left := 0
		for _, p := range in.Pods {
			pod, err := a.Kube.CoreV1().Pods(in.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				activity.GetLogger(ctx).Warn("pod not read", "pod", p.Name, "error", err)
				left++
			case string(pod.UID) == p.UID:
				left++
			}
		}
		if left == 0 {
			return nil
		}
		activity.RecordHeartbeat(ctx, left)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(a.poll()):
		}
	}
}

// ReadyInput asks for a workload's new Pods to be Ready on other devices.
type ReadyInput struct {
	Workload api.Workload `json:"workload"`
	Device   device.ID    `json:"device"`
	// Before are the workload's Pods when the move began; they do not count.
	Before []PodInfo `json:"before"`
	// Want is how many new Ready Pods the move needs.
	Want int `json:"want"`
}

// WaitWorkloadReady waits, heartbeating, until Want of the workload's new Pods are Ready and none
// of their claims is allocated the quarantined device. It returns their names.
func (a *Activities) WaitWorkloadReady(ctx context.Context, in ReadyInput) ([]string, error) {
	old := map[string]bool{}
	for _, p := range in.Before {
		old[p.UID] = true
	}
	for {
		ready, err := a.readyElsewhere(ctx, in, old)
		if err == nil && len(ready) >= max(1, in.Want) {
			return ready, nil
		}
		if err != nil {
			activity.GetLogger(ctx).Warn("workload pods not read", "error", err)
		}
		activity.RecordHeartbeat(ctx, ready)
		select {
		case <-ctx.Done():
			return ready, ctx.Err()
		case <-time.After(a.poll()):
		}
	}
}

func (a *Activities) readyElsewhere(ctx context.Context, in ReadyInput, old map[string]bool) ([]string, error) {
	pods, err := a.workloadPods(ctx, in.Workload)
	if err != nil {
		return nil, err
	}
	var ready []string
	for i := range pods {
		p := &pods[i]
		if old[string(p.UID)] || !kubeobj.PodReady(p) {
			continue
		}
		uses, err := a.usesDevice(ctx, p, in.Device)
		if err != nil {
			return nil, err
		}
		if !uses {
			ready = append(ready, p.Name)
		}
	}
	return ready, nil
}

// usesDevice reads the allocations of the Pod's claims.
func (a *Activities) usesDevice(ctx context.Context, pod *corev1.Pod, id device.ID) (bool, error) {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		claim, err := a.Kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get claim %s/%s of pod %s: %w", pod.Namespace, *s.ResourceClaimName, pod.Name, err)
		}
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver == id.Driver && r.Pool == id.Pool && r.Device == id.Device {
				return true, nil
			}
		}
	}
	return false, nil
}

// MigrationRecord is what a finished migration adds to the metrics.
type MigrationRecord struct {
	Outcome        migrationplan.MigrationOutcome `json:"outcome"`
	Class          migrationplan.FailureClass     `json:"class,omitempty"`
	Duration       time.Duration                  `json:"duration"`
	CheckpointWait time.Duration                  `json:"checkpointWait,omitempty"`
	// OnDevice is how long the workload stayed on the device after the quarantine (0 if it never left).
	OnDevice time.Duration `json:"onDevice,omitempty"`
}

// RecordMigration counts a finished migration.
func (a *Activities) RecordMigration(_ context.Context, r MigrationRecord) error {
	if a.Metrics == nil {
		return nil
	}
	a.Metrics.Migrations.WithLabelValues(string(r.Outcome), string(r.Class)).Inc()
	a.Metrics.MigrationSeconds.Observe(r.Duration.Seconds())
	if r.CheckpointWait > 0 {
		a.Metrics.CheckpointSeconds.Observe(r.CheckpointWait.Seconds())
	}
	if r.OnDevice > 0 {
		a.Metrics.IdleDeviceSeconds.Add(r.OnDevice.Seconds())
	}
	return nil
}
