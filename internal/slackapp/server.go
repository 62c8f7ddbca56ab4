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
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// Decider delivers an operator command to a device's workflow and returns its answer
// (api.SendCommand over a Temporal client).
type Decider interface {
	Decide(ctx context.Context, id device.ID, cmd devicemsg.Command) (devicemsg.CommandResult, error)
	// ApproveRollout approves going on past a rollout's phase and says where the rollout stands.
	ApproveRollout(ctx context.Context, name string, cmd rolloutplan.Command) (string, error)
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
	// Replays remembers served requests; nil remembers in this process only.
	Replays Replays
	// Now is the clock (a seam for tests).
	Now func() time.Time

	memory memoryReplays
	wg     sync.WaitGroup
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
	if err := s.verify(r.Context(), r.Header, body); err != nil {
		s.logger().Warn("slack request refused", "reason", err, "remote", r.RemoteAddr)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	cb, err := parse(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	notice, err := s.handle(cb)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
	case notice != "":
		writeJSON(w, map[string]any{"response_type": "ephemeral", "replace_original": false, "text": notice})
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// handle acts on a verified interaction, whichever way it came (the HTTP endpoint or Socket
// Mode): it checks the button, its review and the approver, answers at once and delivers the
// decision in the background, then updates the message with the outcome. notice is a message
// for the clicking user alone; err means the request is not a DeviceWarden button.
func (s *Server) handle(cb slack.InteractionCallback) (notice string, err error) {
	if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) == 0 {
		return "", nil
	}
	act := cb.ActionCallback.BlockActions[0]
	if act.ActionID == ActionRolloutApprove {
		return s.approveRollout(cb, act.Value)
	}
	kind := map[string]devicemsg.CommandKind{ActionApprove: devicemsg.CmdApprove, ActionReject: devicemsg.CmdReject}[act.ActionID]
	dev, review, _ := strings.Cut(act.Value, reviewSep)
	id, err := device.ParseID(dev)
	if kind == "" || err != nil {
		return "", errors.New("not a DeviceWarden approval button")
	}
	if review == "" {
		// A message from before buttons named their review: it cannot say which it was for.
		return fmt.Sprintf("This message names no review of %s, so it cannot say which one it was for: decide on the newest approval message, or with `devicewarden device %s`.", id, kind), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !s.allowed(ctx, cb.User.ID) {
		s.logger().Warn("approval refused: approver not on the allow-list", "user", cb.User.ID, "name", cb.User.Name, "device", id.String(), "decision", kind)
		return fmt.Sprintf("You are not allowed to %s releases; this attempt was recorded.", kind), nil
	}
	cmd := devicemsg.Command{Kind: kind, Actor: "slack:" + cb.User.ID, Reason: "via Slack by " + cb.User.Name, Review: review}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.deliver(id, cmd, cb.Channel.ID, cb.Container.MessageTs)
	}()
	return "", nil
}

// approveRollout handles a rollout phase's Approve button (value <rollout>/<phase>).
func (s *Server) approveRollout(cb slack.InteractionCallback, value string) (string, error) {
	name, phase, ok := strings.Cut(value, "/")
	if !ok || name == "" || phase == "" || strings.Contains(phase, "/") {
		return "", errors.New("not a DeviceWarden rollout approval button")
	}
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !s.allowed(actx, cb.User.ID) {
		s.logger().Warn("approval refused: approver not on the allow-list", "user", cb.User.ID, "name", cb.User.Name, "rollout", name, "phase", phase)
		return "You are not allowed to approve rollout phases; this attempt was recorded.", nil
	}
	cmd := rolloutplan.Command{Actor: "slack:" + cb.User.ID, Reason: "via Slack by " + cb.User.Name, Phase: phase, At: s.now()}
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
	return "", nil
}

// Wait returns when decisions being delivered are done (for shutdown and tests).
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) deliver(id device.ID, cmd devicemsg.Command, channel, ts string) {
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
func (s *Server) verify(ctx context.Context, h http.Header, body []byte) error {
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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	first, err := s.replays().First(ctx, key, s.now())
	switch {
	case err != nil:
		return fmt.Errorf("replay check: %w", err)
	case !first:
		return errors.New("replayed request")
	}
	return nil
}

func (s *Server) replays() Replays {
	if s.Replays != nil {
		return s.Replays
	}
	return &s.memory
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
