package watcher

import (
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
)

// An Unhealthy observation carries its cause: the one a detector gave, else the one the worst
// report's message says (kubelet's status, a driver's taint); a Healthy or Unknown one carries none.
func TestObservationsCarryTheirCause(t *testing.T) {
	id := device.ID{Driver: "gpu.example.com", Pool: "n1", Device: "gpu-0"}
	now := time.Now()
	for _, tt := range []struct {
		name    string
		reports map[string][]Report
		want    *cause.Cause
	}{
		{"kubelet's message", map[string][]Report{"ns/p": {{Device: id, Health: device.Unhealthy, Message: "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"}}},
			&cause.Cause{XID: 13, PCI: "0000:3b:00"}},
		{"a driver's taint", map[string][]Report{"slicetaint:x": {{Device: id, Health: device.Unhealthy, Message: "driver tainted the device in its ResourceSlice: gpu.nvidia.com/xid=79:NoSchedule"}}},
			&cause.Cause{XID: 79}},
		{"a detector's word", map[string][]Report{
			"ns/p":     {{Device: id, Health: device.Unhealthy, Message: "XID 13"}},
			"report:r": {{Device: id, Health: device.Unhealthy, Message: "dcgm: xid:79", Cause: cause.Cause{Code: "xid:79", XID: 79}}},
		}, &cause.Cause{Code: "xid:79", XID: 79}},
		{"a detector's cause over a Pod's message that says none", map[string][]Report{
			"ns/p":     {{Device: id, Health: device.Unhealthy, Message: "zz device failed"}},
			"report:r": {{Device: id, Health: device.Unhealthy, Message: "dcgm: xid:48", Cause: cause.Cause{Code: "xid:48", XID: 48}}},
		}, &cause.Cause{Code: "xid:48", XID: 48}},
		{"no cause said", map[string][]Report{"ns/p": {{Device: id, Health: device.Unhealthy, Message: "device failed"}}}, nil},
		{"healthy", map[string][]Report{"ns/p": {{Device: id, Health: device.Healthy, Message: "XID 13 cleared"}}}, nil},
		{"unknown", map[string][]Report{"ns/p": {{Device: id, Health: device.Unknown, Message: "XID 13?", Cause: cause.Cause{XID: 13}}}}, nil},
	} {
		for k, rs := range tt.reports {
			for i := range rs {
				rs[i].Reporter = api.Reporter{Pod: k, Health: rs[i].Health}
			}
		}
		got := aggregate(id, &entry{reports: tt.reports}, now).Cause
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("%s: cause %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
