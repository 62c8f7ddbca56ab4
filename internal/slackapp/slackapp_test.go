package slackapp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

var gpu = device.ID{Driver: "gpu.sim.devicewarden.io", Pool: "gpu-node-0", Device: "gpu-3"}

// review is the review the approval messages in these tests ask about; button is their buttons' value.
const review = "2026-12-01T10:00:00.5Z"

var button = ButtonValue(gpu, review)

// webAPI is slacktest's server with chat.postMessage recorded in full (blocks included) and the
// chat.update and usergroups.users.list methods it lacks.
type webAPI struct {
	srv     *slacktest.Server
	mu      sync.Mutex
	posts   []url.Values
	updates []url.Values
	down    bool
}

func newWebAPI(t *testing.T) *webAPI {
	w := &webAPI{}
	record := func(into *[]url.Values) http.HandlerFunc {
		return func(rw http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			v, _ := url.ParseQuery(string(body))
			w.mu.Lock()
			down := w.down
			if !down {
				*into = append(*into, v)
			}
			w.mu.Unlock()
			if down {
				http.Error(rw, "unavailable", http.StatusServiceUnavailable)
				return
			}
			rw.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(rw, `{"ok":true,"channel":%q,"ts":"1700000000.000100","text":""}`, v.Get("channel"))
		}
	}
	w.srv = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", record(&w.posts))
		c.Handle("/chat.update", record(&w.updates))
		c.Handle("/usergroups.users.list", func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Content-Type", "application/json")
			fmt.Fprint(rw, `{"ok":true,"users":["UGROUP1"]}`)
		})
	})
	w.srv.Start()
	t.Cleanup(w.srv.Stop)
	return w
}

func (w *webAPI) client() *slack.Client { return NewClient("xoxb-test", w.srv.GetAPIURL()) }

func (w *webAPI) snapshot() (posts, updates []url.Values) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]url.Values(nil), w.posts...), append([]url.Values(nil), w.updates...)
}

func TestApprovalMessage(t *testing.T) {
	api := newWebAPI(t)
	m := metrics.New()
	n := &Notifier{Client: api.client(), Channel: "#fallback", UIURL: "http://127.0.0.1:8233", Metrics: m}
	req := notify.ApprovalRequest{Device: gpu, Review: review, Node: "gpu-node-0", Reason: "device reported Unhealthy: XID 79", Summary: "probe passed, canary passed",
		WorkflowID: gpu.WorkflowID(), Channel: "#gpu-ops",
		Probe: &devicemsg.StepResult{Passed: true, Reason: "exited 0, device Healthy"}, Canary: &devicemsg.StepResult{Passed: true, Reason: "exited 0, device Healthy"}}
	if err := n.RequestApproval(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	posts, _ := api.snapshot()
	if len(posts) != 1 || posts[0].Get("channel") != "#gpu-ops" {
		t.Fatalf("posts %v", posts)
	}
	var blocks slack.Blocks
	if err := json.Unmarshal([]byte(posts[0].Get("blocks")), &blocks); err != nil {
		t.Fatalf("blocks: %v (%s)", err, posts[0].Get("blocks"))
	}
	if len(blocks.BlockSet) != 2 {
		t.Fatalf("%d blocks", len(blocks.BlockSet))
	}
	text := blocks.BlockSet[0].(*slack.SectionBlock).Text.Text
	for _, want := range []string{gpu.String(), "gpu-node-0", "XID 79", "Probe:* passed", "Canary:* passed",
		"http://127.0.0.1:8233/namespaces/default/workflows/device%2Fgpu.sim.devicewarden.io%2Fgpu-node-0%2Fgpu-3"} {
		if !strings.Contains(text, want) {
			t.Errorf("message lacks %q:\n%s", want, text)
		}
	}
	acts := blocks.BlockSet[1].(*slack.ActionBlock).Elements.ElementSet
	if len(acts) != 2 || acts[0].(*slack.ButtonBlockElement).ActionID != ActionApprove || acts[0].(*slack.ButtonBlockElement).Value != button || acts[1].(*slack.ButtonBlockElement).Value != button ||
		acts[1].(*slack.ButtonBlockElement).ActionID != ActionReject {
		t.Fatalf("buttons %+v", acts)
	}

	// Alerts go to the policy's channel, or the default one.
	if err := n.Alert(context.Background(), notify.AlertInput{Device: gpu, Level: devicemsg.LevelCritical, Text: "device reported Unhealthy: XID 79"}); err != nil {
		t.Fatal(err)
	}
	posts, _ = api.snapshot()
	if got := posts[1]; got.Get("channel") != "#fallback" || !strings.Contains(got.Get("text"), ":red_circle: *"+gpu.String()+"*: device reported Unhealthy") {
		t.Fatalf("alert %v", got)
	}
}

func TestSlackDownNeverFailsAnAlert(t *testing.T) {
	api := newWebAPI(t)
	api.down = true
	m := metrics.New()
	n := &Notifier{Client: api.client(), Channel: "#ops", Metrics: m, Backoff: time.Millisecond}
	if err := n.Alert(context.Background(), notify.AlertInput{Device: gpu, Level: devicemsg.LevelWarning, Text: "x"}); err != nil {
		t.Fatalf("alert with Slack down: %v", err)
	}
	if got := counter(t, m, "devicewarden_slack_notifications_total", "failed"); got != 1 {
		t.Fatalf("failed notifications = %v", got)
	}
	if err := n.RequestApproval(context.Background(), notify.ApprovalRequest{Device: gpu}); err == nil {
		t.Fatal("an approval request Slack never got reported success")
	}
}

func counter(t *testing.T, m *metrics.Metrics, name, result string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return mm.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// decider records the commands the server delivers.
type decider struct {
	mu       sync.Mutex
	cmds     []devicemsg.Command
	ids      []device.ID
	rollouts []string
	err      error
}

func (d *decider) Decide(_ context.Context, id device.ID, cmd devicemsg.Command) (devicemsg.CommandResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cmds, d.ids = append(d.cmds, cmd), append(d.ids, id)
	if d.err != nil {
		return devicemsg.CommandResult{}, d.err
	}
	return devicemsg.CommandResult{State: devicemsg.Released, Message: "released"}, nil
}

func (d *decider) ApproveRollout(_ context.Context, name string, cmd rolloutplan.Command) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rollouts = append(d.rollouts, name+"/"+cmd.Phase+" by "+cmd.Actor)
	if d.err != nil {
		return "", d.err
	}
	return "running (phase 2, step preflight)", nil
}

func (d *decider) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.cmds)
}

const secret = "8f742231b10e8888abcd99yyyzzz85a5"

func sign(body string, ts time.Time, key string) http.Header {
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("v0:" + stamp + ":" + body))
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	return h
}

func buttonBody(user, action, value string) string {
	payload := map[string]any{
		"type": "block_actions", "user": map[string]string{"id": user, "name": "alice"},
		"channel":   map[string]string{"id": "C123"},
		"container": map[string]string{"type": "message", "message_ts": "1700000000.000100", "channel_id": "C123"},
		"actions":   []map[string]string{{"block_id": "devicewarden-approval", "action_id": action, "value": value, "type": "button"}},
	}
	b, _ := json.Marshal(payload)
	return url.Values{"payload": {string(b)}}.Encode()
}

func post(t *testing.T, h http.Handler, body string, hdr http.Header) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/slack/interactivity", strings.NewReader(body))
	r.Header = hdr
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestInteractivityEndpoint(t *testing.T) {
	api := newWebAPI(t)
	d := &decider{}
	srv := &Server{SigningSecret: secret, Client: api.client(), Decider: d, AllowedUsers: []string{"UALLOWED"}, AllowedGroup: "S1"}
	now := time.Now()
	body := buttonBody("UALLOWED", ActionApprove, button)

	// A valid request: the decision arrives with the approver as actor, the message is updated.
	if w := post(t, srv, body, sign(body, now, secret)); w.Code != http.StatusOK {
		t.Fatalf("valid request: %d %s", w.Code, w.Body)
	}
	srv.Wait()
	if d.count() != 1 || d.cmds[0].Kind != devicemsg.CmdApprove || d.cmds[0].Actor != "slack:UALLOWED" || d.ids[0] != gpu || d.cmds[0].Review != review {
		t.Fatalf("decisions %+v %v", d.cmds, d.ids)
	}
	_, updates := api.snapshot()
	if len(updates) != 1 || updates[0].Get("channel") != "C123" || updates[0].Get("ts") != "1700000000.000100" ||
		!strings.Contains(updates[0].Get("text"), "approve by <@UALLOWED> -> Released") {
		t.Fatalf("message updates %v", updates)
	}

	// The exact request again: refused, no second decision. So is the same request with its
	// signature upper-cased (hex decoding ignores case, so it still verifies).
	if w := post(t, srv, body, sign(body, now, secret)); w.Code != http.StatusUnauthorized {
		t.Fatalf("replay: %d", w.Code)
	}
	upper := sign(body, now, secret)
	upper.Set("X-Slack-Signature", "v0="+strings.ToUpper(strings.TrimPrefix(upper.Get("X-Slack-Signature"), "v0=")))
	if w := post(t, srv, body, upper); w.Code != http.StatusUnauthorized {
		t.Fatalf("replay with the signature upper-cased: %d %s", w.Code, w.Body)
	}
	srv.Wait()
	if d.count() != 1 {
		t.Fatalf("a replay was decided: %+v", d.cmds)
	}
	// A bad signature and a stale timestamp: 401, no decision.
	other := buttonBody("UALLOWED", ActionReject, button)
	if w := post(t, srv, other, sign(other, now, "not-the-secret")); w.Code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d", w.Code)
	}
	if w := post(t, srv, other, sign(other, now.Add(-6*time.Minute), secret)); w.Code != http.StatusUnauthorized {
		t.Fatalf("stale timestamp: %d", w.Code)
	}
	tampered := sign(other, now, secret)
	if w := post(t, srv, buttonBody("UALLOWED", ActionApprove, button)+"&x=1", tampered); w.Code != http.StatusUnauthorized {
		t.Fatalf("body changed after signing: %d", w.Code)
	}
	// Someone not on the list: refused with a message, no decision.
	stranger := buttonBody("USTRANGER", ActionApprove, button)
	w := post(t, srv, stranger, sign(stranger, now, secret))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "not allowed") {
		t.Fatalf("stranger: %d %s", w.Code, w.Body)
	}
	// A member of the allowed user group may.
	member := buttonBody("UGROUP1", ActionReject, button)
	if w := post(t, srv, member, sign(member, now, secret)); w.Code != http.StatusOK {
		t.Fatalf("group member: %d", w.Code)
	}
	srv.Wait()
	if d.count() != 2 || d.cmds[1].Kind != devicemsg.CmdReject || d.cmds[1].Actor != "slack:UGROUP1" {
		t.Fatalf("decisions after the refusals %+v", d.cmds)
	}
	// A refused command (the workflow's validator) is shown in the message.
	d.err = errors.New("reject: no release is waiting for approval")
	late := buttonBody("UALLOWED", ActionReject, button)
	post(t, srv, late, sign(late, now.Add(time.Second), secret))
	srv.Wait()
	_, updates = api.snapshot()
	if got := updates[len(updates)-1].Get("text"); !strings.Contains(got, "refused: reject: no release is waiting") {
		t.Fatalf("refusal not shown: %s", got)
	}
	// A message from before buttons named their review: answered, and nothing decided.
	old := buttonBody("UALLOWED", ActionApprove, gpu.String())
	if w := post(t, srv, old, sign(old, now.Add(2*time.Second), secret)); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "names no review") {
		t.Fatalf("a button without its review: %d %s", w.Code, w.Body)
	}
	srv.Wait()
	if d.count() != 3 {
		t.Fatalf("a button without its review decided: %+v", d.cmds)
	}
	// Malformed requests.
	for _, b := range []string{"payload=%7Bnot-json", "nothing=here", buttonBody("UALLOWED", "other-action", button), buttonBody("UALLOWED", ActionApprove, "not-a-device")} {
		if w := post(t, srv, b, sign(b, now, secret)); w.Code != http.StatusBadRequest {
			t.Errorf("%q: %d", b, w.Code)
		}
	}
	if d.count() != 3 {
		t.Fatalf("%d decisions, want 3", d.count())
	}
}

// TestRolloutApprovalButton: a rollout phase's Approve button reaches the rollout with the approver
// as actor and updates the message; a stranger, a forged value and a refusal are handled.
func TestRolloutApprovalButton(t *testing.T) {
	api := newWebAPI(t)
	d := &decider{}
	srv := &Server{SigningSecret: secret, Client: api.client(), Decider: d, AllowedUsers: []string{"UALLOWED"}}
	now := time.Now()
	body := buttonBody("UALLOWED", ActionRolloutApprove, "gpu-dra/canary")
	if w := post(t, srv, body, sign(body, now, secret)); w.Code != http.StatusOK {
		t.Fatalf("valid request: %d %s", w.Code, w.Body)
	}
	srv.Wait()
	if len(d.rollouts) != 1 || d.rollouts[0] != "gpu-dra/canary by slack:UALLOWED" || d.count() != 0 {
		t.Fatalf("rollout approvals %v, device decisions %d", d.rollouts, d.count())
	}
	_, updates := api.snapshot()
	if len(updates) != 1 || !strings.Contains(updates[0].Get("text"), "phase canary approved by <@UALLOWED> -> running") {
		t.Fatalf("message updates %v", updates)
	}
	stranger := buttonBody("USTRANGER", ActionRolloutApprove, "gpu-dra/canary")
	if w := post(t, srv, stranger, sign(stranger, now, secret)); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "not allowed") {
		t.Fatalf("stranger: %d %s", w.Code, w.Body)
	}
	for _, v := range []string{"gpu-dra", "/canary", "gpu-dra/", "a/b/c"} {
		b := buttonBody("UALLOWED", ActionRolloutApprove, v)
		if w := post(t, srv, b, sign(b, now, secret)); w.Code != http.StatusBadRequest {
			t.Errorf("value %q: %d", v, w.Code)
		}
	}
	d.err = errors.New(`approve-phase rollout gpu-dra: phase "canary" does not wait for approval`)
	late := buttonBody("UALLOWED", ActionRolloutApprove, "gpu-dra/canary")
	post(t, srv, late, sign(late, now.Add(time.Second), secret))
	srv.Wait()
	_, updates = api.snapshot()
	if got := updates[len(updates)-1].Get("text"); !strings.Contains(got, "refused: approve-phase rollout gpu-dra") {
		t.Fatalf("refusal not shown: %s", got)
	}
	if len(d.rollouts) != 2 {
		t.Fatalf("rollout approvals %v", d.rollouts)
	}
}

func TestRolloutApprovalMessage(t *testing.T) {
	blocks := RolloutApprovalBlocks(notify.RolloutApprovalRequest{Rollout: "gpu-dra", Phase: "canary", Next: "tenants", Summary: "passed; 3 claims"}, "http://ui/x")
	b, _ := json.Marshal(blocks)
	for _, want := range []string{"passed phase `canary`", "*Next phase:* tenants", "passed; 3 claims", ActionRolloutApprove, `"value":"gpu-dra/canary"`, "http://ui/x"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("blocks lack %q: %s", want, b)
		}
	}
}

// A repair step's approval says which step waits, and its buttons carry the step's ID, not a review's.
func TestRepairStepApprovalMessage(t *testing.T) {
	in := notify.ApprovalRequest{Device: gpu, Node: "node-1", Reason: "XID 79", Summary: "repair step node (attempt 1 of 1) on node node-1", Review: "repair-2", Step: "node"}
	b, _ := json.Marshal(ApprovalBlocks(in, ""))
	for _, want := range []string{"Repair step `node` of `" + gpu.String() + "` waits for approval", "*Step:* repair step node", `"value":"` + ButtonValue(gpu, "repair-2") + `"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("blocks lack %q: %s", want, b)
		}
	}
	if strings.Contains(string(b), "Release of") || approvalTitle(in) != "Repair step node of "+gpu.String()+" waits for approval" {
		t.Errorf("a repair step's message speaks of a release: %s / %s", b, approvalTitle(in))
	}
}

// A request stays known for the whole replay window, to the nanosecond, and is forgotten after it.
func TestMemoryReplaysKeepTheWholeWindow(t *testing.T) {
	var m memoryReplays
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if first, _ := m.First(context.Background(), "k", t0); !first {
		t.Fatal("a new request counted as a replay")
	}
	if first, _ := m.First(context.Background(), "k", t0.Add(replayWindow)); first {
		t.Fatal("a replay at the end of the window passed")
	}
	if first, _ := m.First(context.Background(), "other", t0.Add(2*replayWindow+time.Nanosecond)); !first {
		t.Fatal("another request refused")
	}
	if first, _ := m.First(context.Background(), "k", t0.Add(2*replayWindow+time.Nanosecond)); !first {
		t.Fatal("a request past the window still remembered")
	}
}
