//go:build e2e

package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/slackapp"
)

// countingDecider counts the decisions delivered to it.
type countingDecider struct {
	mu sync.Mutex
	n  int
}

func (d *countingDecider) Decide(context.Context, device.ID, decide.Command) (decide.CommandResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	return decide.CommandResult{State: decide.Released}, nil
}

func (d *countingDecider) ApproveRollout(context.Context, string, rolloutplan.Command) (string, error) {
	return "", nil
}

// TestSlackReplayRefusedAcrossReplicas: a signed button press served by one replica is refused by
// the other and by a restarted one: what was served is kept as a Lease on the real API server.
// Leases older than the replay window are swept.
func TestSlackReplayRefusedAcrossReplicas(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns, secret = "slack-replay", "e2e-replay-secret"
	if err := sim.EnsureNamespace(ctx, shared.kube, ns); err != nil {
		t.Fatal(err)
	}
	d := &countingDecider{}
	clock := time.Now()
	replica := func() *slackapp.Server {
		return &slackapp.Server{SigningSecret: secret, Decider: d, AllowedUsers: []string{"UOPS"},
			Replays: &slackapp.LeaseReplays{Kube: shared.kube, Namespace: ns}, Now: func() time.Time { return clock }}
	}
	press := func(review string) (string, http.Header) {
		id := device.ID{Driver: sim.Driver, Pool: "replay-node", Device: "gpu-0"}
		payload, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]string{"id": "UOPS", "name": "ops"},
			"actions": []map[string]string{{"block_id": "devicewarden-approval", "action_id": slackapp.ActionApprove,
				"value": slackapp.ButtonValue(id, review), "type": "button"}}})
		body := url.Values{"payload": {string(payload)}}.Encode()
		stamp := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte("v0:" + stamp + ":" + body))
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", stamp)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
		return body, h
	}
	send := func(srv *slackapp.Server, body string, h http.Header) int {
		r := httptest.NewRequest(http.MethodPost, "/slack/interactivity", strings.NewReader(body))
		r.Header = h.Clone()
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		srv.Wait()
		return w.Code
	}
	a, b := replica(), replica()
	body, h := press("2026-12-01T10:00:00Z")
	if code := send(a, body, h); code != http.StatusOK {
		t.Fatalf("first press on replica A: %d", code)
	}
	if code := send(b, body, h); code != http.StatusUnauthorized {
		t.Fatalf("the same press on replica B: %d, want 401", code)
	}
	if code := send(replica(), body, h); code != http.StatusUnauthorized {
		t.Fatalf("the same press on a restarted replica: %d, want 401", code)
	}
	if d.n != 1 {
		t.Fatalf("%d decisions delivered, want 1", d.n)
	}
	// Eleven minutes on, the next served request sweeps the first one's Lease.
	clock = clock.Add(11 * time.Minute)
	body2, h2 := press("2026-12-01T11:00:00Z")
	if code := send(b, body2, h2); code != http.StatusOK {
		t.Fatalf("another press on replica B: %d", code)
	}
	list, err := shared.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: slackapp.LabelSlackRequest + "=true"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("request Leases after the sweep: %d (%v), want the newest only", len(list.Items), err)
	}
}
