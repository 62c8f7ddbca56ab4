package watcher

import (
	"net/http"
	"slices"
	"testing"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func watchSample(watch string) map[string]any {
	return map[string]any{"__name__": "DCGM_EXP_GPU_HEALTH_STATUS", "UUID": "GPU-bbbb", "Hostname": "node-1", "gpu": "1", "health_watch": watch, "value": "20"}
}

// Two health watches fail on one GPU: each is its own word. When the MEM watch passes while the SM
// watch still fails, the device is told the SM watch stands, not that nothing does.
func TestOneWatchThatPassesLeavesAnotherStanding(t *testing.T) {
	rec, prom, _ := promWatcherOf(t, "{name: health, query: 'DCGM_EXP_GPU_HEALTH_STATUS >= 20', kind: level, codeLabel: health_watch}")
	const q = "DCGM_EXP_GPU_HEALTH_STATUS >= 20"
	prom.set(q, watchSample("MEM"), watchSample("SM"))
	both := []string{"dcgm: health:MEM", "dcgm: health:SM"}
	waitUntil(t, "both levels stand", func() bool {
		s := rec.signals()
		return len(s) > 0 && slices.Equal(s[len(s)-1].Standing, both) && len(s[len(s)-1].Reporters) == 0
	})
	n := len(rec.signals())
	prom.set(q, watchSample("SM"))
	waitUntil(t, "the MEM watch gone", func() bool { return len(rec.signals()) > n })
	gone := rec.signals()[n]
	if gone.Device != (device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}) || !slices.Equal(gone.Standing, []string{"dcgm: health:SM"}) {
		t.Fatalf("after the MEM watch passed: %+v", gone)
	}
}

// Two XIDs of one GPU in one answer (119, which a reset may fix, and 31, the application's) are
// two faults: neither replaces the other, and the observation names the device's, whichever
// series the answer lists first.
func TestTwoXIDsInOneAnswerAreBothKeptAndTheDevicesWins(t *testing.T) {
	for _, order := range [][]string{{"119", "31"}, {"31", "119"}} {
		rec, prom, _ := promWatcher(t)
		prom.set("DCGM_FI_DEV_XID_ERRORS", xidSample("GPU-bbbb", "0"))
		waitPolls(t, prom, 2)
		var answer []map[string]any
		for _, x := range order {
			s := xidSample("GPU-bbbb", x)
			s["err_code"] = x
			answer = append(answer, s)
		}
		prom.set("DCGM_FI_DEV_XID_ERRORS", answer...)
		waitUntil(t, "the faults sent", func() bool { return len(rec.signals()) > 0 })
		got := rec.signals()[0]
		if got.Health != device.Unhealthy || len(got.Reporters) != 2 || got.Cause == nil || got.Cause.XID != 119 {
			t.Fatalf("order %v: signalled %+v (cause %+v)", order, got, got.Cause)
		}
	}
}

// A partial answer withdraws no level: the device is not told its level went.
func TestAPartialAnswerLeavesTheLevelStanding(t *testing.T) {
	rec, prom, m := promWatcherOf(t, "{name: recovery-action, query: 'DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION > 0', kind: level}")
	const q = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION > 0"
	prom.set(q, recoverySample("GPU-bbbb", "2"))
	waitUntil(t, "the fault sent, then withdrawn", func() bool { return len(rec.signals()) == 2 })
	prom.setPartial(true)
	prom.set(q)
	waitPolls(t, prom, 4)
	if n := len(rec.signals()); n != 2 {
		t.Fatalf("a partial answer withdrew the level: %+v", rec.signals()[2:])
	}
	if v := testutilValue(m.SignalPartial.WithLabelValues("prometheus", "recovery-action")); v < 1 {
		t.Fatalf("partial answers counted %v", v)
	}
	prom.setPartial(false)
	waitUntil(t, "the level gone on a complete answer", func() bool { return len(rec.signals()) == 3 })
}

// A new leader re-sends a running device's state before Prometheus answered: it says it has not
// read what stands (StandingUnread), so the workflow keeps its standing words. Once every level
// signal answered, the device hears what stands now: here nothing, and it says so as read.
func TestANewLeaderSaysItHasNotReadWhatStands(t *testing.T) {
	pols, err := policy.Parse([]byte("signals:\n  prometheus:\n    - {name: recovery-action, query: 'DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION > 0', kind: level}\n"))
	if err != nil {
		t.Fatal(err)
	}
	gpu := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	rec := &recorder{running: []device.ID{gpu}}
	prom := &fakeProm{answers: map[string][]map[string]any{}, status: http.StatusServiceUnavailable}
	promWatcherFor(t, pols, rec, prom)
	waitUntil(t, "the running device re-sent", func() bool { return len(rec.signals()) > 0 })
	waitPolls(t, prom, 2)
	for _, o := range rec.signals() {
		if !o.StandingUnread {
			t.Fatalf("sent before Prometheus answered, as read: %+v", o)
		}
	}
	n := len(rec.signals())
	prom.mu.Lock()
	prom.status = 0
	prom.mu.Unlock()
	waitUntil(t, "the device told what stands", func() bool { return len(rec.signals()) > n })
	if got := rec.signals()[n]; got.Device != gpu || got.StandingUnread || len(got.Standing) != 0 {
		t.Fatalf("after Prometheus answered: %+v", got)
	}
}
