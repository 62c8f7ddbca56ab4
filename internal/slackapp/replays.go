package slackapp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Replays remembers the signed requests already served, so that a captured request is served once.
type Replays interface {
	// First records key and says whether this is the first time it is seen.
	First(ctx context.Context, key string, now time.Time) (bool, error)
}

// memoryReplays remembers in this process only: a restart or another replica forgets.
type memoryReplays struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (m *memoryReplays) First(_ context.Context, key string, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]time.Time{}
	}
	for k, at := range m.seen {
		if now.Sub(at) > replayWindow {
			delete(m.seen, k)
		}
	}
	if _, dup := m.seen[key]; dup {
		return false, nil
	}
	m.seen[key] = now
	return true, nil
}

// LabelSlackRequest marks the Leases that remember served Slack requests.
const LabelSlackRequest = "devicewarden.io/slack-request"

// LeaseReplays remembers served requests as Leases in DeviceWarden's namespace, named after the
// request: a restart, or the replica a load balancer sends the copy to, refuses it too. Creating
// a Lease that exists is how a replay is known; Leases older than the replay window are deleted on
// the way, at most once a minute.
type LeaseReplays struct {
	Kube      kubernetes.Interface
	Namespace string

	mu    sync.Mutex
	swept time.Time
}

// First creates the request's Lease; it exists already for a replay. An error (the API server
// unreachable) refuses the request: a replay must never pass for want of a check.
func (l *LeaseReplays) First(ctx context.Context, key string, now time.Time) (bool, error) {
	if len(key) < 40 {
		return false, errors.New("replay key too short")
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "devicewarden-slack-" + key[:40], Namespace: l.Namespace,
			Labels: map[string]string{LabelSlackRequest: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("slack-request"), AcquireTime: &metav1.MicroTime{Time: now}},
	}
	_, err := l.Kube.CoordinationV1().Leases(l.Namespace).Create(ctx, lease, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("remember the request: %w", err)
	}
	l.sweep(ctx, now)
	return true, nil
}

// sweep deletes the Leases of requests older than the replay window (best effort).
func (l *LeaseReplays) sweep(ctx context.Context, now time.Time) {
	l.mu.Lock()
	if now.Sub(l.swept) < time.Minute {
		l.mu.Unlock()
		return
	}
	l.swept = now
	l.mu.Unlock()
	leases := l.Kube.CoordinationV1().Leases(l.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: LabelSlackRequest + "=true"})
	if err != nil {
		return
	}
	for _, le := range list.Items {
		if at := le.Spec.AcquireTime; at != nil && now.Sub(at.Time) > replayWindow {
			_ = leases.Delete(ctx, le.Name, metav1.DeleteOptions{})
		}
	}
}
