//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// TestOrderSurvivesFailoverToAnOlderReplica: replica a starts, then b; b leads and reports a
// device Unknown; b goes (its node drained) and a, the replica that started first, leads. The
// device turning Unhealthy under a is quarantined: a's reports order after b's because a takes its
// term when it starts to lead. With a term taken when the process started, a's reports counted as
// older than b's and were ignored, and the device stayed Suspect.
func TestOrderSurvivesFailoverToAnOlderReplica(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	const leaseName = "devicewarden-watcher"
	// A holder that is neither replica keeps the Lease until the test hands it to b, so that b
	// leads although a started first.
	if _, err := s.kube.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: leaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("placeholder"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: ptr.To(metav1.NowMicro()), RenewTime: ptr.To(metav1.NowMicro())},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replica := func(identity string) (string, func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, stop := s.controller(app.ControllerOptions{Workers: 4, MetricsListener: ln,
			Breaker: breaker.Config{Window: time.Minute, MaxCount: 100},
			LeaderElection: &app.LeaderElection{Namespace: "default", Name: leaseName, Identity: identity,
				LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}})
		return ln.Addr().String(), stop
	}
	readyA, stopA := replica("a")
	defer stopA()
	eventually(t, 30*time.Second, "a started as a follower", func() error { return expectReady(readyA, "follower") })
	readyB, stopB := replica("b")
	defer stopB()
	eventually(t, 30*time.Second, "b started as a follower", func() error { return expectReady(readyB, "follower") })

	l, err := s.kube.CoordinationV1().Leases("default").Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("b"), ptr.To[int32](int32(leaseDuration/time.Second))
	l.Spec.RenewTime = ptr.To(metav1.NowMicro())
	if _, err := s.kube.CoordinationV1().Leases("default").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "b leads, its watcher synced", func() error { return expectReady(readyB, "ok") })

	id := devicePods(t, ctx, s.kube, "order", 1)[0]
	setHealth(t, ctx, s.kube, []device.ID{id}, corev1.ResourceHealthStatusUnknown)
	var underB decide.DeviceState
	eventually(t, 30*time.Second, "b's Unknown report taken", func() error {
		var err error
		underB, err = stateOf(ctx, s, id)
		if err == nil && (underB.State != decide.Suspect || underB.Seq == nil) {
			err = fmt.Errorf("state %s, seq %v", underB.State, underB.Seq)
		}
		return err
	})

	stopB() // b's node drained: it gives the Lease up
	eventually(t, 30*time.Second, "a leads, its watcher synced", func() error { return expectReady(readyA, "ok") })
	setHealth(t, ctx, s.kube, []device.ID{id}, corev1.ResourceHealthStatusUnhealthy)
	settled(t, ctx, s, id, decide.Quarantined)
	st, err := stateOf(ctx, s, id)
	if err != nil {
		t.Fatal(err)
	}
	if !underB.Seq.Before(*st.Seq) {
		t.Fatalf("a's report %+v does not order after b's %+v", *st.Seq, *underB.Seq)
	}
	if st.Ignored != underB.Ignored {
		t.Fatalf("%d of the new leader's reports ignored as older", st.Ignored-underB.Ignored)
	}
}
