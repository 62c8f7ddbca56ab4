package watcher

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
)

func lease(node string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr.To(seconds)}}
}

func TestNodeLeaseExpiryIsOneNodeDecision(t *testing.T) {
	now := time.Unix(1700000000, 0)
	n := newNodeLeases()
	n.put(lease("node-1", now.Add(-10*time.Second), 40), now)
	n.put(lease("node-2", now.Add(-50*time.Second), 40), now) // found silent at start: one duration of grace
	if down, _ := n.changes(now.Add(30 * time.Second)); len(down) != 0 {
		t.Fatalf("down before a full duration was watched: %v", down)
	}
	n.put(lease("node-1", now.Add(30*time.Second), 40), now.Add(30*time.Second))
	n.put(lease("node-2", now.Add(-50*time.Second), 40), now.Add(35*time.Second)) // written, not renewed
	down, up := n.changes(now.Add(41 * time.Second))
	if len(down) != 1 || !strings.Contains(down["node-2"], "node-2 outage") || len(up) != 0 {
		t.Fatalf("down %v up %v", down, up)
	}
	if down, _ := n.changes(now.Add(42 * time.Second)); len(down) != 0 {
		t.Fatalf("the same outage was decided twice: %v", down)
	}
	n.put(lease("node-2", now.Add(time.Second), 40), now.Add(43*time.Second))
	if _, up := n.changes(now.Add(44 * time.Second)); len(up) != 1 || up[0] != "node-2" {
		t.Fatalf("renewal not noticed: %v", up)
	}
}

// A node whose clock runs a minute behind writes renewTimes that look a minute old: it renews, so
// it is up.
func TestNodeClockSkewIsNotAnOutage(t *testing.T) {
	now := time.Unix(1700000000, 0)
	n := newNodeLeases()
	for i := 0; i < 10; i++ {
		at := now.Add(time.Duration(i) * 10 * time.Second)
		n.put(lease("skewed", at.Add(-time.Minute), 40), at)
		if down, _ := n.changes(at.Add(5 * time.Second)); len(down) != 0 {
			t.Fatalf("skewed node taken for down at step %d: %v", i, down)
		}
	}
}

func TestStoreOutageTurnsFollowedHealthyDevicesUnknown(t *testing.T) {
	s := newStore()
	now := time.Unix(1700000000, 0)
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	s.seed([]device.ID{id}) // a followed device: its workflow runs
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Healthy, "a")}, nil, nil, false)
	s.markSignalled(mustNext(t, s, id, now, device.Healthy), now)
	ids := s.setOutage("node-1", "node node-1 outage")
	if len(ids) != 1 || ids[0] != id {
		t.Fatalf("outage affects %v", ids)
	}
	obs, d := s.next(id, now, 0, nil)
	if d != doSignal || obs.Health != device.Unknown || obs.Message != "node node-1 outage" {
		t.Fatalf("during outage: %v %+v", d, obs)
	}
	s.markSignalled(obs, now)
	s.setOutage("node-1", "")
	if obs, d := s.next(id, now, 0, nil); d != doSignal || obs.Health != device.Healthy {
		t.Fatalf("after outage: %v %+v", d, obs)
	}
}

func mustNext(t *testing.T, s *store, id device.ID, now time.Time, h device.Health) (o api.Observation) {
	t.Helper()
	s.mu.Lock()
	e := s.devices[id]
	s.mu.Unlock()
	o = aggregate(id, e, now)
	if o.Health != h {
		t.Fatalf("health %s, want %s", o.Health, h)
	}
	return o
}
