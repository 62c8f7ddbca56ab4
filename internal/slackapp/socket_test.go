package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// socketSlack plays Slack's side of Socket Mode on a local server: apps.connections.open (which
// must carry the app-level token) hands out a WebSocket URL, and on that socket it says hello and
// sends the envelopes it is given, one after the other, each once the previous was acknowledged.
type socketSlack struct {
	t          *testing.T
	srv        *httptest.Server
	envelopes  []map[string]any
	mu         sync.Mutex
	acks       []string
	ephemerals []string
	appToken   string
	// refuseOpens makes the first apps.connections.open calls fail; opens counts them all.
	refuseOpens, opens int
}

func newSocketSlack(t *testing.T, envelopes ...map[string]any) *socketSlack {
	s := &socketSlack{t: t, envelopes: envelopes}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/apps.connections.open", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.appToken = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.opens++
		refuse := s.opens <= s.refuseOpens
		s.mu.Unlock()
		if refuse {
			writeJSON(w, map[string]any{"ok": false, "error": "internal_error"})
			return
		}
		writeJSON(w, map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/link"})
	})
	mux.HandleFunc("/api/chat.postEphemeral", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		s.mu.Lock()
		s.ephemerals = append(s.ephemerals, r.Form.Get("user")+": "+r.Form.Get("text"))
		s.mu.Unlock()
		writeJSON(w, map[string]any{"ok": true, "message_ts": "1700000000.000200"})
	})
	mux.HandleFunc("/api/chat.update", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"ok": true, "channel": "C123", "ts": "1700000000.000100"})
	})
	mux.HandleFunc("/link", func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}).Upgrade(w, r, nil)
		if err != nil {
			t.Errorf("upgrade: %v", err)
			return
		}
		defer conn.Close()
		_ = conn.WriteJSON(map[string]any{"type": "hello", "num_connections": 1})
		for _, env := range s.envelopes {
			if err := conn.WriteJSON(env); err != nil {
				return
			}
			var ack struct {
				EnvelopeID string `json:"envelope_id"`
			}
			if err := conn.ReadJSON(&ack); err != nil {
				return
			}
			s.mu.Lock()
			s.acks = append(s.acks, ack.EnvelopeID)
			s.mu.Unlock()
		}
		_, _, _ = conn.ReadMessage() // hold the connection until the client closes it
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *socketSlack) snapshot() (acks, ephemerals []string, appToken string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.acks...), append([]string(nil), s.ephemerals...), s.appToken
}

// serve runs a Server deciding with d over Socket Mode against this Slack until done holds, then
// stops it; after 20 s it fails with what this Slack saw.
func (s *socketSlack) serve(t *testing.T, d Decider, done func() bool) {
	t.Helper()
	srv := &Server{Client: NewSocketClient("xoxb-bot", "xapp-app", s.srv.URL+"/api/"), Decider: d, AllowedUsers: []string{"UOPS"}}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- srv.RunSocketMode(ctx, srv.Client) }()
	for deadline := time.Now().Add(20 * time.Second); !done(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			acks, eph, _ := s.snapshot()
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("after 20 s: %d opens, acks %v, ephemeral notices %v", s.opens, acks, eph)
		}
	}
	cancel()
	if err := <-ended; err != nil {
		t.Fatalf("socket mode ended with %v", err)
	}
}

// envelope is an interactive Socket Mode envelope: a press of a button by user.
func envelope(id, user, action, value string, retry int) map[string]any {
	var payload map[string]any
	_ = json.Unmarshal([]byte(`{"type":"block_actions"}`), &payload)
	payload["user"] = map[string]string{"id": user, "name": user}
	payload["channel"] = map[string]string{"id": "C123"}
	payload["container"] = map[string]string{"type": "message", "message_ts": "1700000000.000100", "channel_id": "C123"}
	payload["actions"] = []map[string]string{{"block_id": "devicewarden-approval", "action_id": action, "value": value, "type": "button"}}
	return map[string]any{"envelope_id": id, "type": "interactive", "payload": payload, "retry_attempt": retry}
}

// Over Socket Mode a press reaches the workflow once: the envelope is acknowledged, a redelivered
// copy is acknowledged and not handled again, a stranger is told no in a message only they see, and
// a button of no review is refused as on the HTTP endpoint.
func TestSocketModeApprovals(t *testing.T) {
	slack := newSocketSlack(t,
		envelope("e1", "UOPS", ActionApprove, button, 0),
		envelope("e1", "UOPS", ActionApprove, button, 1),
		envelope("e2", "USTRANGER", ActionApprove, button, 0),
		envelope("e3", "UOPS", ActionApprove, gpu.String(), 0))
	d := &decider{}
	slack.serve(t, d, func() bool {
		acks, eph, _ := slack.snapshot()
		return len(acks) == 4 && len(eph) == 2
	})
	acks, eph, appToken := slack.snapshot()
	if appToken != "xapp-app" {
		t.Fatalf("connection opened with %q, want the app-level token", appToken)
	}
	if strings.Join(acks, ",") != "e1,e1,e2,e3" {
		t.Fatalf("acks %v", acks)
	}
	if d.count() != 1 || d.cmds[0].Actor != "slack:UOPS" || d.cmds[0].Review != review || d.ids[0] != gpu {
		t.Fatalf("decisions %+v: want the first press only", d.cmds)
	}
	if !strings.HasPrefix(eph[0], "USTRANGER: You are not allowed") || !strings.Contains(eph[1], "names no review") {
		t.Fatalf("ephemeral notices %v", eph)
	}
}

// Slack refusing to open the connection (an outage) does not end Socket Mode: it opens it again,
// backing off, and then takes the presses.
func TestSocketModeOpensTheConnectionAgain(t *testing.T) {
	slack := newSocketSlack(t, envelope("e1", "UOPS", ActionApprove, button, 0))
	slack.refuseOpens = 1
	d := &decider{}
	slack.serve(t, d, func() bool { return d.count() > 0 })
	slack.mu.Lock()
	defer slack.mu.Unlock()
	if slack.opens < 2 {
		t.Fatalf("%d opens: want the refused one and the next", slack.opens)
	}
}

// failingReplays cannot tell a first request from a redelivery (its store does not answer).
type failingReplays struct{}

func (failingReplays) First(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("apiserver unavailable")
}

// A press whose redelivery check fails (the apiserver does not answer) is not handled, and the
// person who pressed is told so in a message only they see (#40, check). Before, the envelope was
// acknowledged and the press dropped with only a log line.
func TestSocketModeTellsOfAPressItCouldNotCheck(t *testing.T) {
	slack := newSocketSlack(t, envelope("e1", "UOPS", ActionApprove, button, 0))
	d := &decider{}
	srv := &Server{Client: NewSocketClient("xoxb-bot", "xapp-app", slack.srv.URL+"/api/"), Decider: d, AllowedUsers: []string{"UOPS"},
		Replays: failingReplays{}}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- srv.RunSocketMode(ctx, srv.Client) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, eph, _ := slack.snapshot()
		if len(eph) > 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("no notice after 20 s: the press was dropped silently")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	acks, eph, _ := slack.snapshot()
	if len(acks) != 1 || d.count() != 0 || !strings.HasPrefix(eph[0], "UOPS: Your press was not recorded") || !strings.Contains(eph[0], "apiserver unavailable") {
		t.Fatalf("acks %v, decisions %d, notices %v", acks, d.count(), eph)
	}
}
