package watcher

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

var benchNow = time.Unix(1700000000, 0)

func rep(dev string, h device.Health, pod string) Report {
	return Report{Device: device.ID{Driver: drv, Pool: "node-1", Device: dev}, Node: "node-1", Health: h,
		Reporter: api.Reporter{Namespace: "ns", Pod: pod, Container: "main", Claim: pod + "-claim", Health: h}}
}

func TestStoreAggregatesWorstAndDeduplicates(t *testing.T) {
	s := newStore()
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	now := time.Unix(1700000000, 0)

	// Healthy, and no workflow: passed over, nothing kept.
	if changed, passed := s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Healthy, "a")}, nil, nil, false); len(changed) != 0 || passed != 1 {
		t.Fatalf("healthy device with no workflow: changed %v, passed over %d", changed, passed)
	}
	if _, d := s.next(id, now, 0, nil); d != skipNothing || len(s.devices) != 0 || len(s.podDevices) != 0 {
		t.Fatalf("healthy device with no workflow: decision %v, %d devices kept", d, len(s.devices))
	}
	// A second pod shares the device (consumable capacity) and reports it Unhealthy; from then on
	// the first pod's reports count too, and the worst wins.
	s.setPod("ns/b", "11", []Report{rep("gpu-0", device.Unhealthy, "b")}, nil, nil, false)
	s.setPod("ns/a", "12", []Report{rep("gpu-0", device.Healthy, "a")}, nil, nil, false)
	obs, d := s.next(id, now, 0, nil)
	if d != doSignal || obs.Health != device.Unhealthy || obs.StatusVersion != "12" || len(obs.Reporters) != 2 {
		t.Fatalf("got %v %+v", d, obs)
	}
	s.markSignalled(obs, now)
	// Same health again with a newer status version: nothing to signal.
	s.setPod("ns/b", "13", []Report{rep("gpu-0", device.Unhealthy, "b")}, nil, nil, false)
	if _, d := s.next(id, now, 0, nil); d != skipDuplicate {
		t.Fatalf("decision %v, want skipDuplicate", d)
	}
	// The unhealthy pod goes away: the device is Healthy again and, having a workflow, is signalled.
	s.deletePod("ns/b", "14")
	obs, d = s.next(id, now, 0, nil)
	if d != doSignal || obs.Health != device.Healthy || obs.StatusVersion != "14" {
		t.Fatalf("after delete: %v %+v", d, obs)
	}
}

func TestStoreManyDevicesOnePod(t *testing.T) {
	s := newStore()
	var reports []Report
	for i := 0; i < 5000; i++ {
		reports = append(reports, rep("gpu-"+string(rune('a'+i%26))+time.Duration(i).String(), device.Unknown, "big"))
	}
	changed, _ := s.setPod("ns/big", "5", reports, nil, nil, false)
	if len(changed) != 5000 {
		t.Fatalf("changed %d devices", len(changed))
	}
	if changed, _ := s.setPod("ns/big", "6", nil, nil, nil, false); len(changed) != 5000 || len(s.devices) != 0 {
		t.Fatalf("retract left %d devices", len(s.devices))
	}
}

func TestStoreHeartbeatAndIdle(t *testing.T) {
	s := newStore()
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	now := time.Unix(1700000000, 0)
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Unknown, "a")}, nil, nil, false)
	obs, d := s.next(id, now, time.Minute, nil)
	if d != doSignal {
		t.Fatalf("first: %v", d)
	}
	s.markSignalled(obs, now)
	if _, d := s.next(id, now.Add(30*time.Second), time.Minute, nil); d != skipDuplicate {
		t.Fatalf("before heartbeat: %v", d)
	}
	hb, d := s.next(id, now.Add(time.Minute), time.Minute, nil)
	if d != doSignal || hb.StatusVersion != obs.StatusVersion || hb.Health != obs.Health {
		t.Fatalf("heartbeat: %v %+v", d, hb)
	}
	// The pod goes away: the workflow hears once that nobody holds the device.
	s.deletePod("ns/a", "11")
	idle, d := s.next(id, now.Add(2*time.Minute), time.Minute, nil)
	if d != doSignal || len(idle.Reporters) != 0 || idle.StatusVersion != "11" {
		t.Fatalf("idle: %v %+v", d, idle)
	}
	s.markSignalled(idle, now.Add(2*time.Minute))
	if _, d := s.next(id, now.Add(10*time.Minute), time.Minute, nil); d != skipNothing {
		t.Fatalf("after idle: %v", d)
	}
}

func TestStoreSeededDevicesAreResentOnce(t *testing.T) {
	s := newStore()
	now := time.Unix(1700000000, 0)
	healthy := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	gone := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-9"}
	s.seed([]device.ID{healthy, gone})
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Healthy, "a")}, nil, nil, false)
	// A Healthy device would normally cost nothing, but its workflow is running: tell it once.
	obs, d := s.next(healthy, now, 0, nil)
	if d != doSignal || obs.Health != device.Healthy {
		t.Fatalf("seeded healthy: %v %+v", d, obs)
	}
	s.markSignalled(obs, now)
	if _, d := s.next(healthy, now, 0, nil); d != skipDuplicate {
		t.Fatalf("second time: %v", d)
	}
	// A device nobody holds any more: its workflow hears that nobody reports it, with no status
	// version (none is known after a restart: the workflow orders by observation time).
	obs, d = s.next(gone, now, 0, nil)
	if d != doSignal || len(obs.Reporters) != 0 || obs.StatusVersion != "" || obs.Health != device.Healthy {
		t.Fatalf("seeded idle: %v %+v", d, obs)
	}
}

func TestRelistSweepsOnlyVanishedPods(t *testing.T) {
	s := newStore()
	gone := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-7"}
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Unknown, "a")}, nil, nil, false)
	s.setPod("ns/b", "10", []Report{rep("gpu-1", device.Unknown, "b")}, nil, nil, false)
	s.setPod(unpublishedKey(gone), "11", []Report{{Device: gone, Health: device.Unknown}}, nil, nil, false)
	s.relistBegin()
	s.markSeen("ns/a")
	if got := s.relistEnd(); len(got) != 1 || got[0] != "ns/b" {
		t.Fatalf("swept %v, want only ns/b", got)
	}
}

func TestStoreForgetsDeviceAfterIdleSignal(t *testing.T) {
	s := newStore()
	now := time.Unix(1700000000, 0)
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Unknown, "a")}, nil, nil, false)
	obs, _ := s.next(id, now, 0, nil)
	s.markSignalled(obs, now)
	s.deletePod("ns/a", "11")
	idle, d := s.next(id, now, 0, nil)
	if d != doSignal {
		t.Fatalf("idle: %v", d)
	}
	s.markSignalled(idle, now)
	if len(s.devices) != 0 {
		t.Fatalf("%d devices kept after the idle signal", len(s.devices))
	}
}

func TestStoreStampsChangesNotHeartbeats(t *testing.T) {
	s := newStore()
	now := time.Unix(1700000000, 0)
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	s.setPod("ns/a", "10", []Report{rep("gpu-0", device.Unknown, "a")}, nil, nil, false)
	first, d := s.next(id, now, time.Minute, nil)
	if d != doSignal || first.Seq == nil || first.Seq.Term != s.term {
		t.Fatalf("first: %v %+v", d, first.Seq)
	}
	s.markSignalled(first, now)
	hb, d := s.next(id, now.Add(2*time.Minute), time.Minute, nil)
	if d != doSignal || *hb.Seq != *first.Seq {
		t.Fatalf("heartbeat got a new sequence: %+v vs %+v", hb.Seq, first.Seq)
	}
	s.setPod("ns/a", "11", []Report{rep("gpu-0", device.Unhealthy, "a")}, nil, nil, false)
	change, d := s.next(id, now.Add(3*time.Minute), time.Minute, nil)
	if d != doSignal || !first.Seq.Before(*change.Seq) {
		t.Fatalf("change not ordered after: %+v then %+v", first.Seq, change.Seq)
	}
}

// Logging once per problem keeps memory per Pod that has one, drops it with the Pod, and never
// grows past its cap however many broken Pods come and go.
func TestLogOnceIsBounded(t *testing.T) {
	var l logOnce
	if !l.first("ns/a", "k") || l.first("ns/a", "k") || !l.first("ns/b", "k") {
		t.Fatal("not once per pod and key")
	}
	l.forget("ns/a")
	if l.n != 1 || !l.first("ns/a", "k") {
		t.Fatalf("forget: n=%d", l.n)
	}
	for i := range 3 * maxLogged {
		l.first(fmt.Sprintf("ns/p-%d", i), "k")
		if l.n > maxLogged {
			t.Fatalf("%d keys kept, cap %d", l.n, maxLogged)
		}
	}
}

// A driver that takes its taint off tells the device's workflow once, as the driver's word.
func TestStoreDriverClearedIsSentOnce(t *testing.T) {
	s := newStore()
	now := time.Unix(1700000000, 0)
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	if s.clearedByDriver(id, devicemsg.SourceSlice) {
		t.Fatal("a device without a workflow has nobody to tell")
	}
	r := rep("gpu-0", device.Unhealthy, "")
	r.Source = devicemsg.SourceSlice
	s.setPod("slicetaint:x", "", []Report{r}, nil, nil, false)
	obs, d := s.next(id, now, 0, nil)
	if d != doSignal || obs.Source != devicemsg.SourceSlice {
		t.Fatalf("taint report: %v source %q", d, obs.Source)
	}
	s.markSignalled(obs, now)
	s.setPod("slicetaint:x", "", nil, nil, nil, false)
	if !s.clearedByDriver(id, devicemsg.SourceSlice) {
		t.Fatal("the followed device was not marked")
	}
	cleared, d := s.next(id, now, 0, nil)
	if d != doSignal || cleared.Source != devicemsg.SourceSlice || cleared.Health != device.Healthy {
		t.Fatalf("cleared: %v %+v", d, cleared)
	}
	s.markSignalled(cleared, now)
	if _, d := s.next(id, now, 0, nil); d == doSignal {
		t.Fatal("the driver's word was sent twice")
	}
}

// A device only Healthy pods report, never signalled, is forgotten with the pods left holding
// nothing; one with any other report, a signalled one, or a seeded one is kept.
func TestStoreForgetsOnlyHealthyUnsignalled(t *testing.T) {
	s := newStore()
	g0 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-0"}
	g1 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	// Both turned Unknown and back before the worker looked at them.
	s.setPod("ns/a", "1", []Report{rep("gpu-0", device.Unknown, "a"), rep("gpu-1", device.Unknown, "a")}, nil, nil, false)
	s.setPod("ns/b", "2", []Report{rep("gpu-0", device.Unknown, "b")}, nil, nil, false)
	s.setPod("ns/a", "3", []Report{rep("gpu-0", device.Healthy, "a"), rep("gpu-1", device.Healthy, "a")}, nil, nil, false)
	s.setPod("ns/b", "4", []Report{rep("gpu-0", device.Healthy, "b")}, nil, nil, false)
	s.forget(g0)
	if _, ok := s.devices[g0]; ok {
		t.Fatal("a Healthy, unsignalled device was kept")
	}
	if _, ok := s.podDevices["ns/b"]; ok {
		t.Fatal("a pod left with no device was kept")
	}
	if left := s.podDevices["ns/a"]; len(left) != 1 || left[0] != g1 {
		t.Fatalf("pod a holds %v, want gpu-1 only", left)
	}
	s.setPod("ns/c", "5", []Report{rep("gpu-1", device.Unknown, "c")}, nil, nil, false)
	s.forget(g1)
	if _, ok := s.devices[g1]; !ok {
		t.Fatal("a device with an Unknown report was forgotten")
	}
	s.setPod("ns/c", "6", nil, nil, nil, false)
	obs, _ := s.next(g1, benchNow, 0, nil)
	s.markSignalled(obs, benchNow)
	s.forget(g1)
	if _, ok := s.devices[g1]; !ok {
		t.Fatal("a device its workflow heard about was forgotten")
	}
}

// A pod whose reports are all passed over (Healthy devices without a workflow) is not tracked; one
// on a node in an outage is not passed over (its Healthy is not current), nor is a pod that
// reports nothing but is kept for an unresolved claim.
func TestStorePassesOverHealthyDevicesWithoutWorkflow(t *testing.T) {
	s := newStore()
	pod := &corev1.Pod{}
	changed, passed := s.setPod("ns/a", "1", []Report{rep("gpu-0", device.Healthy, "a"), rep("gpu-1", device.Healthy, "a")}, []string{"ns/a-claim"}, pod, false)
	if len(changed) != 0 || passed != 2 || s.tracked("ns/a") || len(s.claimPods) != 0 || len(s.devices) != 0 {
		t.Fatalf("changed %v, passed over %d, tracked %v, %d devices", changed, passed, s.tracked("ns/a"), len(s.devices))
	}
	// One of its devices turns Unknown: both are kept from then on (the Healthy one only until the
	// worker forgets it), and so is the pod.
	changed, passed = s.setPod("ns/a", "2", []Report{rep("gpu-0", device.Healthy, "a"), rep("gpu-1", device.Unknown, "a")}, []string{"ns/a-claim"}, pod, false)
	if len(changed) != 1 || changed[0].Device != "gpu-1" || passed != 1 || !s.tracked("ns/a") {
		t.Fatalf("changed %v, passed over %d, tracked %v", changed, passed, s.tracked("ns/a"))
	}
	s.setOutage("node-1", "node node-1 outage")
	if changed, passed := s.setPod("ns/b", "3", []Report{rep("gpu-5", device.Healthy, "b")}, nil, pod, false); len(changed) != 1 || passed != 0 {
		t.Fatalf("during an outage: changed %v, passed over %d", changed, passed)
	}
	if obs, d := s.next(device.ID{Driver: drv, Pool: "node-1", Device: "gpu-5"}, benchNow, 0, nil); d != doSignal || obs.Health != device.Unknown {
		t.Fatalf("during an outage: %v %+v", d, obs)
	}
	if _, passed := s.setPod("ns/c", "4", nil, []string{"ns/c-claim"}, pod, false); passed != 0 || !s.tracked("ns/c") {
		t.Fatal("a pod kept for an unresolved claim was dropped")
	}
	// Healthy reports passed over, and another entry of the pod still unresolved: the pod is kept,
	// so the claim that resolves that entry later finds it.
	s.setOutage("node-1", "")
	if _, passed := s.setPod("ns/d", "5", []Report{rep("gpu-6", device.Healthy, "d")}, []string{"ns/d-ready", "ns/d-late"}, pod, true); passed != 1 || !s.tracked("ns/d") || len(s.claimPods["ns/d-late"]) != 1 {
		t.Fatal("a pod with an unresolved entry was dropped because its resolved reports were Healthy")
	}
}
