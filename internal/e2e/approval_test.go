//go:build e2e

package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/slackapp"
)

// freedQuarantine quarantines a device of the given class and frees it (its Pod leaves), so that
// its review's probe and canary can run.
func freedQuarantine(t *testing.T, ctx context.Context, s *stack, prefix, class string) device.ID {
	t.Helper()
	if err := sim.EnsureClass(ctx, s.kube, class); err != nil {
		t.Fatal(err)
	}
	nodes, err := sim.CreateNodes(ctx, s.kube, prefix, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-1"}
	runningPod(t, ctx, s.kube, sim.Workload{Namespace: prefix, Name: "trainer", Node: nodes[0], Index: ptr.To(1), Template: true, DeviceClass: class})
	if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 48"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "quarantined", func() error {
		_, err := s.kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{})
		return err
	})
	if err := s.kube.CoreV1().Pods(prefix).Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSlackApproval: a device whose policy needs approval waits after probe, canary and window;
// an Approve button press, signed as Slack signs it, reaches the real workflow through the
// approvals endpoint and releases the device.
func TestSlackApproval(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := freedQuarantine(t, ctx, shared, "approve", approvalClass)
	st := waitState(t, ctx, shared, id, time.Minute, func(st decide.DeviceState) bool {
		return st.Review != nil && st.Review.Stage == decide.StageApproval
	})
	if _, err := shared.kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("rule gone before approval: %v", err)
	}
	if !strings.Contains(st.Summary(), "waiting for approval") {
		t.Fatalf("summary %q", st.Summary())
	}
	// The Temporal UI shows the same line: the workflow's current details.
	eventually(t, 5*time.Second, "current details in the workflow metadata", func() error {
		v, err := shared.temporal.QueryWorkflow(ctx, id.WorkflowID(), "", "__temporal_workflow_metadata")
		if err != nil {
			return err
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			return err
		}
		if !strings.Contains(md.GetCurrentDetails(), "waiting for approval until") {
			return fmt.Errorf("current details %q", md.GetCurrentDetails())
		}
		return nil
	})
	srv := &slackapp.Server{SigningSecret: "e2e-secret", Decider: slackapp.TemporalDecider{Client: shared.temporal}, AllowedUsers: []string{"UOPS"}}
	press := func(user, review string) int {
		return signedPress(srv, "e2e-secret", user, slackapp.ActionApprove, slackapp.ButtonValue(id, review))
	}
	if code := press("USTRANGER", st.Review.ID()); code != http.StatusOK {
		t.Fatalf("stranger: %d", code)
	}
	if st, err := queryState(ctx, id.WorkflowID()); err != nil || st.State != decide.Recovering {
		t.Fatalf("a stranger's approval changed the device: %s %v", st.State, err)
	}
	// A button of a message left over from an earlier review: the workflow refuses it.
	if code := press("UOPS", st.Review.StartedAt.Add(-time.Hour).UTC().Format(time.RFC3339Nano)); code != http.StatusOK {
		t.Fatalf("stale button: %d", code)
	}
	srv.Wait()
	if st, err := queryState(ctx, id.WorkflowID()); err != nil || st.State != decide.Recovering {
		t.Fatalf("a button of an earlier review changed the device: %s %v", st.State, err)
	}
	if code := press("UOPS", st.Review.ID()); code != http.StatusOK {
		t.Fatalf("approver: %d", code)
	}
	st = waitState(t, ctx, shared, id, 10*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Released })
	if st.Closed[0].ClosedBy != "slack:UOPS" {
		t.Fatalf("closed by %q", st.Closed[0].ClosedBy)
	}
	recordHistory(t, ctx, shared.temporal, id.WorkflowID(), "device_approval.json")
}

// signedPress presses a Slack button as Slack would send it (signed with secret) and returns the
// server's answer once the decision is delivered.
func signedPress(srv *slackapp.Server, secret, user, action, value string) int {
	payload, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]string{"id": user, "name": user},
		"actions": []map[string]string{{"block_id": "devicewarden-approval", "action_id": action, "value": value, "type": "button"}}})
	body := url.Values{"payload": {string(payload)}}.Encode()
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + stamp + ":" + body))
	r := httptest.NewRequest(http.MethodPost, "/slack/interactivity", strings.NewReader(body))
	r.Header.Set("X-Slack-Request-Timestamp", stamp)
	r.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	srv.Wait()
	return w.Code
}

// TestWorkerStoppedMidProbe: the worker stops while the probe Pod runs; the probe Pod is cleaned
// up, the restarted worker probes again, and there is never more than one probe Pod.
func TestWorkerStoppedMidProbe(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	pols, err := testPolicies()
	if err != nil {
		t.Fatal(err)
	}
	opts := app.ControllerOptions{Workers: 4, Policies: pols}
	s.noKubelet = true // the probe Pod keeps running until the worker is gone
	_, stop1 := s.controller(opts)
	id := freedQuarantine(t, ctx, s, "midprobe", releaseClass)
	probeNS := policy.DefaultProbeNamespace
	eventually(t, time.Minute, "probe pod running", func() error {
		pods, err := s.kube.CoreV1().Pods(probeNS).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("probe pods %v (%v)", len(pods.Items), err)
		}
		return nil
	})
	stop1()
	eventually(t, 30*time.Second, "probe pod cleaned up after the worker stopped", func() error {
		pods, err := s.kube.CoreV1().Pods(probeNS).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 0 {
			return fmt.Errorf("%d probe pods left (%v)", len(pods.Items), err)
		}
		return nil
	})
	s.noKubelet = false
	_, stop2 := s.controller(opts)
	defer stop2()
	st := waitState(t, ctx, s, id, 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	// One review, whose probe outcome was recorded once (by the restarted worker).
	reviews := 0
	for _, tr := range st.Transitions {
		if tr.To == decide.Recovering && tr.From != decide.Recovering {
			reviews++
		}
	}
	if len(st.Closed) != 1 || reviews != 1 || st.LastProbe == nil || !st.LastProbe.Passed {
		t.Fatalf("closed %d, reviews %d, probe %+v; transitions %+v", len(st.Closed), reviews, st.LastProbe, st.Transitions)
	}
	pods, err := s.kube.CoreV1().Pods(probeNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Fatalf("probe pods left: %d (%v)", len(pods.Items), err)
	}
}

// TestDryRunTurnedOff: with --dry-run the rule only previews (effect None); restarted without it,
// the controller turns the still-failed device's rule into a real one.
func TestDryRunTurnedOff(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	_, stop1 := s.controller(app.ControllerOptions{Workers: 4, DryRun: true})
	nodes, err := sim.CreateNodes(ctx, s.kube, "dry", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	runningPod(t, ctx, s.kube, sim.Workload{Namespace: "dry", Name: "trainer", Node: nodes[0], Index: ptr.To(0), Template: true})
	if _, err := sim.SetHealth(ctx, s.kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	effect := func(want string) func() error {
		return func() error {
			r, err := s.kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if string(r.Spec.Taint.Effect) != want {
				return fmt.Errorf("effect %s, want %s", r.Spec.Taint.Effect, want)
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, "preview rule", effect("None"))
	settled(t, ctx, s, id, decide.Quarantined)
	stop1()
	before, _ := stateOf(ctx, s, id)
	// The restarted watcher re-sends the device's report once, and heartbeats re-read the fence too:
	// either turns the preview rule real (heartbeats every 2 s here, 2 min by default).
	_, stop2 := s.controller(app.ControllerOptions{Workers: 4, HeartbeatInterval: 2 * time.Second})
	defer stop2()
	defer func() {
		if t.Failed() {
			st, _ := stateOf(ctx, s, id)
			t.Logf("before restart: seq %+v heard %s; now: seq %+v heard %s health %s effect %+v ignored %d",
				before.Seq, before.LastHeard, st.Seq, st.LastHeard, st.Health, st.Quarantine, st.Ignored)
		}
	}()
	eventually(t, 30*time.Second, "real rule after dry run is off", effect("NoSchedule"))
	st := waitState(t, ctx, s, id, 10*time.Second, func(st decide.DeviceState) bool { return st.Quarantine != nil && st.Quarantine.Effect == "NoSchedule" })
	if st.State != decide.Quarantined || len(st.Closed) != 0 {
		t.Fatalf("state %s, closed %+v", st.State, st.Closed)
	}
}

// settled waits until the device's workflow is in the state with no activity pending: stop a
// controller only then, since an activity cut off by a stopping worker is retried only after its
// timeout, which is not what the restart tests are about.
func settled(t *testing.T, ctx context.Context, s *stack, id device.ID, want decide.State) {
	t.Helper()
	eventually(t, 45*time.Second, "workflow settled", func() error {
		d, err := s.temporal.DescribeWorkflowExecution(ctx, id.WorkflowID(), "")
		if err != nil {
			return err
		}
		if n := len(d.GetPendingActivities()); n > 0 {
			return fmt.Errorf("%d activities pending", n)
		}
		st, err := stateOf(ctx, s, id)
		if err != nil || st.State != want {
			return fmt.Errorf("state %s (%v)", st.State, err)
		}
		return nil
	})
}
