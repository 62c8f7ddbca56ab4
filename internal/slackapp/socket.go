package slackapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// NewSocketClient is the Slack client for Socket Mode: the bot token for messages and the
// app-level token (xapp-) that opens the connection.
func NewSocketClient(botToken, appToken, apiURL string) *slack.Client {
	c := NewClient(botToken, apiURL)
	slack.OptionAppLevelToken(appToken)(c)
	return c
}

// RunSocketMode takes button presses over Slack's Socket Mode until ctx ends: DeviceWarden opens
// the connection (apps.connections.open with the app-level token), so a cluster with no public
// endpoint takes approvals. Slack does not sign Socket Mode payloads: the app token that opened
// the connection vouches for them. Every envelope is acknowledged; Slack sends one again when the
// acknowledgement was late, and an envelope ID already handled is not handled twice. The button,
// its review and the approver are checked as on the HTTP endpoint. A lost connection is opened
// again, backing off from 1 s to 1 min; it never ends the process.
func (s *Server) RunSocketMode(ctx context.Context, api *slack.Client) error {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		sm := socketmode.New(api)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- sm.RunContext(runCtx) }()
		err := s.serveEvents(runCtx, sm, done)
		cancel()
		if ctx.Err() != nil {
			s.Wait()
			return nil
		}
		s.logger().Warn("slack socket mode connection lost; opening it again", "error", err, "in", wait)
		select {
		case <-ctx.Done():
			s.Wait()
			return nil
		case <-time.After(wait):
		}
	}
}

// serveEvents handles the connection's events until it ends.
func (s *Server) serveEvents(ctx context.Context, sm *socketmode.Client, done <-chan error) error {
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("connection closed")
			}
			return err
		case evt := <-sm.Events:
			switch evt.Type {
			case socketmode.EventTypeConnected:
				s.logger().Info("slack socket mode connected")
			case socketmode.EventTypeInvalidAuth:
				s.logger().Error("slack socket mode: the app-level token was refused")
			case socketmode.EventTypeInteractive:
				cb, ok := evt.Data.(slack.InteractionCallback)
				if !ok || evt.Request == nil {
					continue
				}
				if err := sm.AckCtx(ctx, evt.Request.EnvelopeID, nil); err != nil {
					s.logger().Warn("slack socket mode: envelope not acknowledged", "envelope", evt.Request.EnvelopeID, "error", err)
				}
				s.interact(ctx, evt.Request.EnvelopeID, cb)
			}
		}
	}
}

// interact handles one interactive envelope once.
func (s *Server) interact(ctx context.Context, envelope string, cb slack.InteractionCallback) {
	sum := sha256.Sum256([]byte("socket-mode:" + envelope))
	first, err := s.replays().First(ctx, hex.EncodeToString(sum[:]), s.now())
	if err != nil {
		// The envelope is acknowledged already (Slack wants it within 3 s): the press is not
		// handled, and the person who pressed is told so rather than left waiting.
		s.logger().Warn("slack socket mode: envelope not handled: its redelivery check failed", "envelope", envelope, "error", err)
		s.notify(ctx, cb, fmt.Sprintf("Your press was not recorded: DeviceWarden could not check it against redeliveries (%v). Press the button again.", err))
		return
	}
	if !first {
		s.logger().Info("slack socket mode: redelivered envelope not handled again", "envelope", envelope)
		return
	}
	notice, err := s.handle(cb)
	if err != nil {
		s.logger().Warn("slack socket mode: not a DeviceWarden button", "error", err)
		return
	}
	s.notify(ctx, cb, notice)
}

// notify posts a message only the person who pressed sees, if there is one to post.
func (s *Server) notify(ctx context.Context, cb slack.InteractionCallback, notice string) {
	if notice != "" && s.Client != nil && cb.Channel.ID != "" {
		if _, err := s.Client.PostEphemeralContext(ctx, cb.Channel.ID, cb.User.ID, slack.MsgOptionText(notice, false)); err != nil {
			s.logger().Warn("slack ephemeral notice not posted", "error", err)
		}
	}
}
