package slackapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rollout"
)

// Decider delivers an operator command to a device's workflow and returns its answer
// (workflows.SendCommand over a Temporal client).
type Decider interface {
	Decide(ctx context.Context, id device.ID, cmd policy.Command) (policy.CommandResult, error)
	// ApproveRollout approves going on past a rollout's phase and says where the rollout stands.
	ApproveRollout(ctx context.Context, name string, cmd rollout.Command) (string, error)
}

// Server serves Slack's interactivity endpoint for approval buttons.
type Server struct {
	SigningSecret string
	Client        *slack.Client
	Decider       Decider
	// AllowedUsers are Slack user IDs that may approve; AllowedGroup a user group ID whose members may.
	AllowedUsers []string
	AllowedGroup string
	Logger       *slog.Logger
	// Now is the clock (a seam for tests).
	Now func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time
	wg   sync.WaitGroup
}

// maxBody bounds an interactivity request; Slack's payloads are a few kilobytes.
const maxBody = 1 << 20

// replayWindow is how long a signed request is remembered; Slack's own check rejects
// timestamps older than five minutes, so nothing older can be replayed.
const replayWindow = 10 * time.Minute

// ServeHTTP verifies the request, answers at once (Slack wants an answer within 3 s) and delivers
// the decision in the background, then updates the message with the outcome.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "request body unreadable or too large", http.StatusBadRequest)
		return
	}
	if err := s.verify(r.Header, body); err != nil {
		s.logger().Warn("slack request refused", "reason", err, "remote", r.RemoteAddr)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	cb, err := parse(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	act := cb.ActionCallback.BlockActions[0]
	if act.ActionID == ActionRolloutApprove {
		s.approveRollout(w, r, cb, act.Value)
		return
	}
	kind := map[string]policy.CommandKind{ActionApprove: policy.CmdApprove, ActionReject: policy.CmdReject}[act.ActionID]
	dev, review, _ := strings.Cut(act.Value, reviewSep)
	id, err := device.ParseID(dev)
	if kind == "" || err != nil {
		http.Error(w, "not a DeviceWarden approval button", http.StatusBadRequest)
		return
	}
	if review == "" {
		// A message from before buttons named their review: it cannot say which it was for.
		writeJSON(w, map[string]any{"response_type": "ephemeral", "replace_original": false,
			"text": fmt.Sprintf("This message names no review of %s, so it cannot say which one it was for: decide on the newest approval message, or with `devicewarden device %s`.", id, kind)})
		return
	}
	if !s.allowed(r.Context(), cb.User.ID) {
		s.logger().Warn("approval refused: approver not on the allow-list", "user", cb.User.ID, "name", cb.User.Name, "device", id.String(), "decision", kind)
		writeJSON(w, map[string]any{"response_type": "ephemeral", "replace_original": false,
			"text": fmt.Sprintf("You are not allowed to %s releases; this attempt was recorded.", kind)})
		return
	}
	w.WriteHeader(http.StatusOK)
	cmd := policy.Command{Kind: kind, Actor: "slack:" + cb.User.ID, Reason: "via Slack by " + cb.User.Name, Review: review}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.deliver(id, cmd, cb.Channel.ID, cb.Container.MessageTs)
	}()
}

// approveRollout handles a rollout phase's Approve button (value <rollout>/<phase>).
func (s *Server) approveRollout(w http.ResponseWriter, r *http.Request, cb slack.InteractionCallback, value string) {
	name, phase, ok := strings.Cut(value, "/")
	if !ok || name == "" || phase == "" || strings.Contains(phase, "/") {
		http.Error(w, "not a DeviceWarden rollout approval button", http.StatusBadRequest)
		return
	}
	if !s.allowed(r.Context(), cb.User.ID) {
		s.logger().Warn("approval refused: approver not on the allow-list", "user", cb.User.ID, "name", cb.User.Name, "rollout", name, "phase", phase)
		writeJSON(w, map[string]any{"response_type": "ephemeral", "replace_original": false,
			"text": "You are not allowed to approve rollout phases; this attempt was recorded."})
		return
	}
	w.WriteHeader(http.StatusOK)
	cmd := rollout.Command{Actor: "slack:" + cb.User.ID, Reason: "via Slack by " + cb.User.Name, Phase: phase, At: s.now()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		state, err := s.Decider.ApproveRollout(ctx, name, cmd)
		outcome := fmt.Sprintf("rollout %s: phase %s approved by <@%s> -> %s", name, phase, cb.User.ID, state)
		if err != nil {
			outcome = fmt.Sprintf("rollout %s: approval of phase %s by <@%s> refused: %v", name, phase, cb.User.ID, err)
		}
		s.logger().Info("slack rollout approval", "rollout", name, "phase", phase, "actor", cmd.Actor, "error", err)
		s.update(ctx, cb.Channel.ID, cb.Container.MessageTs, outcome)
	}()
}

// Wait returns when decisions being delivered are done (for shutdown and tests).
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) deliver(id device.ID, cmd policy.Command, channel, ts string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Decider.Decide(ctx, id, cmd)
	outcome := fmt.Sprintf("%s: %s by <@%s> -> %s (%s)", id, cmd.Kind, cmd.Actor[len("slack:"):], res.State, res.Message)
	if err != nil {
		outcome = fmt.Sprintf("%s: %s by <@%s> refused: %v", id, cmd.Kind, cmd.Actor[len("slack:"):], err)
	}
	s.logger().Info("slack decision", "device", id.String(), "decision", cmd.Kind, "actor", cmd.Actor, "error", err)
	s.update(ctx, channel, ts, outcome)
}

// update replaces the approval message with the outcome.
func (s *Server) update(ctx context.Context, channel, ts, outcome string) {
	if s.Client == nil || channel == "" || ts == "" {
		return
	}
	md := slack.NewTextBlockObject(slack.MarkdownType, outcome, false, false)
	if _, _, _, err := s.Client.UpdateMessageContext(ctx, channel, ts, slack.MsgOptionText(outcome, false),
		slack.MsgOptionBlocks(slack.NewSectionBlock(md, nil, nil))); err != nil {
		s.logger().Warn("slack message not updated", "error", err)
	}
}

// verify checks the signing secret, the timestamp (at most 5 minutes off) and that the exact
// request was not seen before.
func (s *Server) verify(h http.Header, body []byte) error {
	if s.SigningSecret == "" {
		return errors.New("no signing secret configured")
	}
	v, err := slack.NewSecretsVerifier(h, s.SigningSecret)
	if err != nil {
		return fmt.Errorf("signature check: %w", err)
	}
	if _, err := v.Write(body); err != nil {
		return err
	}
	if err := v.Ensure(); err != nil {
		return fmt.Errorf("signature check: %w", err)
	}
	// Replays are known by what was signed, the timestamp and the body: the signature's own
	// text is not unique (hex decoding ignores case, so an upper-cased copy verifies too).
	sum := sha256.Sum256([]byte(h.Get("X-Slack-Request-Timestamp") + ":" + string(body)))
	key := hex.EncodeToString(sum[:])
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	for k, at := range s.seen {
		if now.Sub(at) > replayWindow {
			delete(s.seen, k)
		}
	}
	if _, dup := s.seen[key]; dup {
		return errors.New("replayed request")
	}
	s.seen[key] = now
	return nil
}

func (s *Server) allowed(ctx context.Context, user string) bool {
	if slices.Contains(s.AllowedUsers, user) {
		return true
	}
	if s.AllowedGroup == "" || s.Client == nil {
		return false
	}
	members, err := s.Client.GetUserGroupMembersContext(ctx, s.AllowedGroup)
	if err != nil {
		s.logger().Warn("user group not read; approval refused", "group", s.AllowedGroup, "error", err)
		return false
	}
	return slices.Contains(members, user)
}

func parse(body []byte) (slack.InteractionCallback, error) {
	var cb slack.InteractionCallback
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return cb, err
	}
	payload := vals.Get("payload")
	if payload == "" {
		return cb, errors.New("no payload")
	}
	if err := json.Unmarshal([]byte(payload), &cb); err != nil {
		return cb, fmt.Errorf("payload: %w", err)
	}
	return cb, nil
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
