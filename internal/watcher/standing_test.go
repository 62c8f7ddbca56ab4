package watcher

import (
	"slices"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

func recoverySample(uuid, value string) map[string]any {
	return map[string]any{"__name__": "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "UUID": uuid, "Hostname": "node-1", "gpu": "1", "value": value}
}

// A level (the driver's recovery action) is a fault when it appears, sent once; withdrawn, it
// stands in the device's observations until its series leaves the answer, and the watcher says
// when it has. When it comes back it is a fault again.
func TestALevelStandsUntilItGoes(t *testing.T) {
	rec, prom, _ := promWatcherOf(t, "{name: recovery-action, query: 'DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION > 0', kind: level}")
	const q = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION > 0"
	prom.set(q, recoverySample("GPU-bbbb", "2"))
	waitUntil(t, "the fault sent, then withdrawn", func() bool { return len(rec.signals()) == 2 })
	fault, withdrawn := rec.signals()[0], rec.signals()[1]
	gpu := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	if fault.Device != gpu || fault.Health != device.Unhealthy || len(fault.Standing) != 0 {
		t.Fatalf("the fault: %+v", fault)
	}
	if withdrawn.Health != device.Healthy || len(withdrawn.Reporters) != 0 || !slices.Equal(withdrawn.Standing, []string{"dcgm: recovery-action:2"}) {
		t.Fatalf("the withdrawal: %+v", withdrawn)
	}
	waitPolls(t, prom, 3)
	if n := len(rec.signals()); n != 2 {
		t.Fatalf("a standing level was sent again: %+v", rec.signals()[2:])
	}
	prom.set(q) // back to none: the query filters it out
	waitUntil(t, "the level gone", func() bool { return len(rec.signals()) == 3 })
	if gone := rec.signals()[2]; gone.Device != gpu || gone.Health != device.Healthy || len(gone.Standing) != 0 {
		t.Fatalf("the level's end: %+v", gone)
	}
	waitPolls(t, prom, 3)
	prom.set(q, recoverySample("GPU-bbbb", "2"))
	waitUntil(t, "a fault again", func() bool { return len(rec.signals()) == 5 })
	if again := rec.signals()[3]; again.Health != device.Unhealthy {
		t.Fatalf("the level came back: %+v", again)
	}
}

// A level that goes before its fault was delivered leaves nothing standing.
func TestALevelGoneBeforeDeliveryLeavesNothing(t *testing.T) {
	s := newStore()
	id := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	s.setPod("prom:x/"+id.String(), "", []Report{{Device: id, Health: device.Unhealthy, Once: "w", Stands: "dcgm: x"}}, nil, nil, false)
	if got := s.levelGone("prom:x/"+id.String(), id); got != nil {
		t.Fatalf("nothing stood, yet %v changed", got)
	}
	s.devices[id].carrying = map[string]string{"prom:x/" + id.String(): "w"}
	s.consume(id, time.Time{})
	if e := s.devices[id]; e != nil && len(e.standing) != 0 {
		t.Fatalf("a level gone before its delivery stands: %+v", e.standing)
	}
}
