package workflows

import (
	"encoding/json"
	"fmt"
	"os"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// history is what the coverage check reads from one recorded history.
type history struct {
	workflowType string
	paths        map[string]bool
}

// readHistory reads a history recorded as JSON and lists the paths it takes: signals, accepted
// updates, activities (local ones from their markers), fired timers, continue-as-new, version
// markers and the DeviceState values the workflow set.
func readHistory(file string) (history, error) {
	f, err := os.Open(file)
	if err != nil {
		return history{}, err
	}
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return history{}, err
	}
	h := history{paths: map[string]bool{}}
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			h.workflowType = ev.GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			h.paths["signal "+ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName()] = true
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			h.paths["update "+ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName()] = true
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			h.paths["activity "+ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()] = true
		case enumspb.EVENT_TYPE_TIMER_FIRED:
			h.paths["timer fired"] = true
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			h.paths["continue-as-new"] = true
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			m := ev.GetMarkerRecordedEventAttributes()
			switch m.GetMarkerName() {
			case "Version":
				var id string
				if err := decode(m.GetDetails()["change-id"], &id); err != nil {
					return h, fmt.Errorf("event %d: version marker: %w", ev.GetEventId(), err)
				}
				h.paths["version "+id] = true
			case "LocalActivity":
				var data struct{ ActivityType string }
				if err := decode(m.GetDetails()["data"], &data); err != nil {
					return h, fmt.Errorf("event %d: local activity marker: %w", ev.GetEventId(), err)
				}
				h.paths["activity "+data.ActivityType] = true
			}
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			fields := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
			if p, ok := fields["DeviceState"]; ok {
				var s string
				if err := json.Unmarshal(p.GetData(), &s); err != nil {
					return h, fmt.Errorf("event %d: DeviceState: %w", ev.GetEventId(), err)
				}
				h.paths["state "+s] = true
			}
		}
	}
	if h.workflowType == "" {
		return h, fmt.Errorf("no WorkflowExecutionStarted event")
	}
	return h, nil
}

func decode(p *commonpb.Payloads, v any) error {
	if p == nil || len(p.GetPayloads()) == 0 {
		return fmt.Errorf("no payload")
	}
	return json.Unmarshal(p.GetPayloads()[0].GetData(), v)
}
