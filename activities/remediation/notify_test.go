package remediation

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/notify"
)

type sent struct {
	alerts    []notify.AlertInput
	approvals []notify.ApprovalRequest
	rollouts  []notify.RolloutApprovalRequest
	err       error
}

func (s *sent) Alert(_ context.Context, in notify.AlertInput) error {
	s.alerts = append(s.alerts, in)
	return s.err
}
func (s *sent) RequestApproval(_ context.Context, in notify.ApprovalRequest) error {
	s.approvals = append(s.approvals, in)
	return s.err
}

func (s *sent) RequestRolloutApproval(_ context.Context, in notify.RolloutApprovalRequest) error {
	s.rollouts = append(s.rollouts, in)
	return s.err
}

func TestAlert(t *testing.T) {
	env, a, _ := activityEnv(t)
	in := notify.AlertInput{Device: gpu3, Level: "critical", Text: "taint failed", WorkflowID: gpu3.WorkflowID(), Channel: "#gpu-ops"}
	if _, err := env.ExecuteActivity(a.Alert, in); err != nil {
		t.Fatalf("without an alerter: %v", err)
	}
	to := &sent{}
	a.Alerter = to
	if _, err := env.ExecuteActivity(a.Alert, in); err != nil || len(to.alerts) != 1 || to.alerts[0] != in {
		t.Fatalf("delivered %+v (%v)", to.alerts, err)
	}
	to.err = errors.New("slack: rate limited")
	if _, err := env.ExecuteActivity(a.Alert, notify.AlertInput{Level: "warning", Text: "breaker open"}); err == nil {
		t.Fatal("a failed delivery must fail the activity (it is retried)")
	}
	if n := testutil.ToFloat64(a.Metrics.Alerts.WithLabelValues("critical")); n != 2 {
		t.Errorf("critical alerts %v", n)
	}
	for level, want := range map[string]string{"critical": "ERROR", "warning": "WARN", "info": "INFO", "": "INFO"} {
		if got := alertLevel(level).String(); got != want {
			t.Errorf("level %q logs at %s, want %s", level, got, want)
		}
	}
}

func TestRequestApproval(t *testing.T) {
	env, a, _ := activityEnv(t)
	req := notify.ApprovalRequest{Device: gpu3, Node: "node-1", Reason: "XID 79", WorkflowID: gpu3.WorkflowID(), Channel: "#gpu-ops"}
	if _, err := env.ExecuteActivity(a.RequestApproval, req); err != nil {
		t.Fatalf("without an approver (CLI only): %v", err)
	}
	to := &sent{}
	a.Approvals = to
	noChannel := req
	noChannel.Channel = ""
	if _, err := env.ExecuteActivity(a.RequestApproval, noChannel); err != nil || len(to.approvals) != 0 {
		t.Fatalf("a policy without a channel posted %+v (%v)", to.approvals, err)
	}
	if _, err := env.ExecuteActivity(a.RequestApproval, req); err != nil || len(to.approvals) != 1 || to.approvals[0].Channel != "#gpu-ops" {
		t.Fatalf("posted %+v (%v)", to.approvals, err)
	}
}

// A node-level alert is also a Warning Event on the node; the retried alert writes it once.
func TestNodeAlertIsAnEventOnTheNode(t *testing.T) {
	env, a, _ := activityEnv(t)
	in := notify.AlertInput{Level: "critical", Text: "2 of 8 devices failed on node-1", WorkflowID: "node/node-1", Node: "node-1"}
	for range 2 {
		if _, err := env.ExecuteActivity(a.Alert, in); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := a.Kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("events %+v", evs.Items)
	}
	e := evs.Items[0]
	if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "node-1" || e.Reason != kubeobj.EventNodeEscalated ||
		e.Type != corev1.EventTypeWarning || e.Message != in.Text {
		t.Fatalf("event %+v", e)
	}
}
