package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The SDK's counters, gauges and timers land on the registry with one label set, whatever tags
// each handler carries; a name already taken by another kind is dropped, not a panic.
func TestTemporalHandler(t *testing.T) {
	m := New()
	h := m.TemporalHandler().WithTags(map[string]string{"namespace": "default", "task_queue": "devicewarden", "unknown_tag": "x"})
	h.Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"operation": "StartWorkflowExecution"}).Counter("temporal_request").Inc(1)
	h.Gauge("temporal_worker_task_slots_available").Update(7)
	h.Timer("temporal_request_latency").Record(40 * time.Millisecond)
	h.Gauge("temporal_request").Update(1) // a counter's name as a gauge: ignored
	want := `
# HELP temporal_request Temporal SDK counter temporal_request.
# TYPE temporal_request counter
temporal_request{activity_type="",namespace="default",operation="",poller_type="",status_code="",task_queue="devicewarden",worker_type="",workflow_type=""} 2
temporal_request{activity_type="",namespace="default",operation="StartWorkflowExecution",poller_type="",status_code="",task_queue="devicewarden",worker_type="",workflow_type=""} 1
# HELP temporal_worker_task_slots_available Temporal SDK gauge temporal_worker_task_slots_available.
# TYPE temporal_worker_task_slots_available gauge
temporal_worker_task_slots_available{activity_type="",namespace="default",operation="",poller_type="",status_code="",task_queue="devicewarden",worker_type="",workflow_type=""} 7
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "temporal_request", "temporal_worker_task_slots_available"); err != nil {
		t.Fatal(err)
	}
	h.Counter("sticky-cache.hit").Inc(1) // a name without the prefix gets it, in Prometheus' alphabet
	if n, err := testutil.GatherAndCount(m.Registry, "temporal_sticky_cache_hit"); err != nil || n != 1 {
		t.Fatalf("renamed counter series: %d, %v", n, err)
	}
	if n, err := testutil.GatherAndCount(m.Registry, "temporal_request_latency_seconds"); err != nil || n != 1 {
		t.Fatalf("timer series: %d, %v", n, err)
	}
}
