package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
)

// onlyDetector is an observation whose only reporter is a detector: the driver's own taint on
// its slice, or a DeviceHealthReport.
func onlyDetector(version int, r Reporter) Observation {
	o := obs(device.Unhealthy, version, "")
	o.Reporters = []Reporter{r}
	return o
}

// A device whose driver (or a detector's report) still says it failed, and that no Pod holds,
// is idle: the ladder takes its next try. Before DetectorsNotHolders it waited for the word to go.
func TestADetectorIsNotAHolder(t *testing.T) {
	for _, r := range []Reporter{
		{Slice: "node-1-gpus", Health: device.Unhealthy},
		{Report: "xid-79-gpu-3", Detector: "nvsentinel", Health: device.Unhealthy},
	} {
		for _, rule := range []bool{false, true} {
			st, _ := onLadder(t, ladderPolicy())
			st.rules.DetectorsNotHolders = rule
			acts := st.Observe(onlyDetector(2, r), t0.Add(time.Minute))
			if !rule {
				wantKinds(t, "without the rule", acts, ActInspectRule)
				if !strings.Contains(st.Next(), "repair once no Pod holds the device") {
					t.Fatalf("next: %s", st.Next())
				}
				continue
			}
			wantKinds(t, "only "+r.Slice+r.Report+" reports it", acts, ActRepair)
			if !st.Quarantine.Ladder.Running || st.Quarantine.Ladder.Tries[0].Kind != "reset" {
				t.Fatalf("ladder %+v", st.Quarantine.Ladder)
			}
			if strings.Contains(st.Next(), "no Pod holds") {
				t.Fatalf("next: %s", st.Next())
			}
		}
	}
}

// A Pod beside the detector still holds the device: no try while it runs there.
func TestAPodBesideADetectorHolds(t *testing.T) {
	st, _ := onLadder(t, ladderPolicy())
	st.rules.DetectorsNotHolders = true
	o := obs(device.Unhealthy, 2, "")
	o.Reporters = append(o.Reporters, Reporter{Report: "r", Detector: "dcgm", Health: device.Unhealthy})
	acts := st.Observe(o, t0.Add(time.Minute))
	wantKinds(t, "a Pod and a report", acts, ActInspectRule)
	if !strings.Contains(st.Next(), "repair once no Pod holds the device") {
		t.Fatalf("next: %s", st.Next())
	}
}
