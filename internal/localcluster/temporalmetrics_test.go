package localcluster

import (
	"maps"
	"strings"
	"testing"
)

func TestCounterByAddsEachSampleToItsLabel(t *testing.T) {
	text := `# HELP action action
# TYPE action counter
action{namespace="default",action_type="grpc_StartWorkflowExecution"} 12
action{action_type="grpc_SignalWorkflowExecution",namespace="a, \"b\" {c}"} 3.5
action{namespace="other",action_type="grpc_StartWorkflowExecution"} 2
action_total{namespace="third"} 4
actions_elsewhere{action_type="grpc_StartWorkflowExecution"} 100
action_latency{action_type="grpc_StartWorkflowExecution"} 9
unrelated 7
`
	got, err := counterBy(strings.NewReader(text), "action", "action_type")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"grpc_StartWorkflowExecution": 14, "grpc_SignalWorkflowExecution": 3.5, "": 4}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := counterBy(strings.NewReader("unrelated 7\n"), "action", "action_type"); err != nil || len(got) != 0 {
		t.Fatalf("no counter: %v, %v", got, err)
	}
}

func TestCounterByRefusesAMalformedSample(t *testing.T) {
	for _, text := range []string{"action{namespace=\"x\" 3\n", "action{namespace=\"x\"}\n", "action abc\n"} {
		if _, err := counterBy(strings.NewReader(text), "action", "action_type"); err == nil {
			t.Errorf("%q: no error", text)
		}
	}
}
