// Package slackapp is DeviceWarden's Slack app: it posts notifications and approval requests
// through the Slack Web API, and serves Slack's interactivity endpoint, turning an allowed
// person's button press into an approve or reject command for the device's workflow. It never
// touches Kubernetes or activities.
package slackapp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// Action IDs of the approval buttons.
const (
	ActionApprove = "devicewarden-approve"
	ActionReject  = "devicewarden-reject"
	// ActionRolloutApprove approves going on past a rollout phase (value <rollout>/<phase>).
	ActionRolloutApprove = "devicewarden-rollout-approve"
)

// Notifier posts to Slack. It implements notify.Alerter and notify.Approver.
type Notifier struct {
	Client *slack.Client
	// Channel receives messages of policies that name none.
	Channel string
	// UIURL is the Temporal Web UI's base address, for links to a device's workflow ("" = no link).
	UIURL     string
	Namespace string
	Metrics   *metrics.Metrics
	// Attempts bounds the tries of one message (default 3); Backoff is the first pause (default 200 ms).
	Attempts int
	Backoff  time.Duration
}

// NewClient is a Web API client; apiURL overrides Slack's address (a proxy, or a test server).
func NewClient(token, apiURL string) *slack.Client {
	// A Slack that hangs must not hold a remediation: every call gives up after 5 s.
	opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: 5 * time.Second})}
	if apiURL != "" {
		if !strings.HasSuffix(apiURL, "/") {
			apiURL += "/"
		}
		opts = append(opts, slack.OptionAPIURL(apiURL))
	}
	return slack.New(token, opts...)
}

// Alert posts an alert. Slack being down never blocks a remediation: after bounded retries the
// failure is logged and counted, and the alert returns no error.
func (n *Notifier) Alert(ctx context.Context, in notify.AlertInput) error {
	text := fmt.Sprintf("%s %s", levelEmoji(in.Level), in.Text)
	if in.Device.Valid() {
		text = fmt.Sprintf("%s *%s*: %s", levelEmoji(in.Level), in.Device, in.Text)
	}
	if link := n.workflowLink(in.WorkflowID); link != "" {
		text += " (<" + link + "|workflow>)"
	}
	n.post(ctx, n.channel(in.Channel), slack.MsgOptionText(text, false))
	return nil
}

// RequestApproval posts the approval message with Approve and Reject buttons.
func (n *Notifier) RequestApproval(ctx context.Context, in notify.ApprovalRequest) error {
	if _, err := n.post(ctx, n.channel(in.Channel), slack.MsgOptionText(approvalTitle(in), false),
		slack.MsgOptionBlocks(ApprovalBlocks(in, n.workflowLink(in.WorkflowID))...)); err != nil {
		return err
	}
	return nil
}

// approvalTitle is an approval message's plain text.
func approvalTitle(in notify.ApprovalRequest) string {
	if in.Step != "" {
		return "Repair step " + in.Step + " of " + in.Device.String() + " waits for approval"
	}
	return "Release of " + in.Device.String() + " waits for approval"
}

// RequestRolloutApproval posts a rollout phase's approval message with an Approve button.
func (n *Notifier) RequestRolloutApproval(ctx context.Context, in notify.RolloutApprovalRequest) error {
	_, err := n.post(ctx, n.channel(in.Channel), slack.MsgOptionText("Rollout "+in.Rollout+" waits for approval past phase "+in.Phase, false),
		slack.MsgOptionBlocks(RolloutApprovalBlocks(in, n.workflowLink(in.WorkflowID))...))
	return err
}

// RolloutApprovalBlocks is the message of a rollout phase's approval; the button carries
// <rollout>/<phase>.
func RolloutApprovalBlocks(in notify.RolloutApprovalRequest, link string) []slack.Block {
	lines := []string{
		fmt.Sprintf("*Rollout `%s` passed phase `%s` and waits for approval*", in.Rollout, in.Phase),
		"*Next phase:* " + orDash(in.Next),
		"*Gates:* " + orDash(in.Summary),
	}
	if link != "" {
		lines = append(lines, "<"+link+"|Workflow in the Temporal UI>")
	}
	md := slack.NewTextBlockObject(slack.MarkdownType, strings.Join(lines, "\n"), false, false)
	approve := slack.NewButtonBlockElement(ActionRolloutApprove, in.Rollout+"/"+in.Phase, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false))
	approve.Style = slack.StylePrimary
	return []slack.Block{slack.NewSectionBlock(md, nil, nil), slack.NewActionBlock("devicewarden-rollout-approval", approve)}
}

// ButtonValue is what an approval button carries: the device and the review it decides on.
func ButtonValue(id device.ID, review string) string { return id.String() + reviewSep + review }

// reviewSep parts a button's device from its review (device IDs have no "|").
const reviewSep = "|"

// ApprovalBlocks is the Block Kit message of an approval request; the buttons carry the device and
// the review, so a message left over from an earlier review decides nothing on a later one.
func ApprovalBlocks(in notify.ApprovalRequest, link string) []slack.Block {
	lines := []string{
		fmt.Sprintf("*Release of `%s` waits for approval*", in.Device),
		"*Node:* " + orDash(in.Node),
		"*Quarantined for:* " + orDash(in.Reason),
		"*Probe:* " + step(in.Probe),
		"*Canary:* " + step(in.Canary),
		"*Review:* " + orDash(in.Summary),
	}
	if in.Step != "" {
		lines = []string{
			fmt.Sprintf("*Repair step `%s` of `%s` waits for approval*", in.Step, in.Device),
			"*Node:* " + orDash(in.Node),
			"*Quarantined for:* " + orDash(in.Reason),
			"*Step:* " + orDash(in.Summary),
		}
	}
	if link != "" {
		lines = append(lines, "<"+link+"|Workflow in the Temporal UI>")
	}
	md := slack.NewTextBlockObject(slack.MarkdownType, strings.Join(lines, "\n"), false, false)
	value := ButtonValue(in.Device, in.Review)
	approve := slack.NewButtonBlockElement(ActionApprove, value, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false))
	approve.Style = slack.StylePrimary
	reject := slack.NewButtonBlockElement(ActionReject, value, slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false))
	reject.Style = slack.StyleDanger
	return []slack.Block{slack.NewSectionBlock(md, nil, nil), slack.NewActionBlock("devicewarden-approval", approve, reject)}
}

func step(r *devicemsg.StepResult) string {
	switch {
	case r == nil:
		return "-"
	case r.Passed:
		return "passed (" + r.Reason + ")"
	}
	return "failed (" + r.Reason + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (n *Notifier) channel(c string) string {
	if c != "" {
		return c
	}
	return n.Channel
}

func (n *Notifier) workflowLink(id string) string {
	if n.UIURL == "" || id == "" {
		return ""
	}
	ns := n.Namespace
	if ns == "" {
		ns = "default"
	}
	return strings.TrimSuffix(n.UIURL, "/") + "/namespaces/" + url.PathEscape(ns) + "/workflows/" + url.PathEscape(id)
}

// post sends one message with bounded retries and counts the outcome.
func (n *Notifier) post(ctx context.Context, channel string, opts ...slack.MsgOption) (string, error) {
	if channel == "" {
		return "", fmt.Errorf("no Slack channel: set slackChannel in the policy or --slack-channel")
	}
	attempts, backoff := n.Attempts, n.Backoff
	if attempts <= 0 {
		attempts = 3
	}
	if backoff <= 0 {
		backoff = 200 * time.Millisecond
	}
	var err error
	for i := 0; i < attempts; i++ {
		var ts string
		if _, ts, err = n.Client.PostMessageContext(ctx, channel, opts...); err == nil {
			n.count("sent")
			return ts, nil
		}
		if i+1 < attempts {
			select {
			case <-ctx.Done():
				i = attempts
			case <-time.After(backoff << i):
			}
		}
	}
	n.count("failed")
	slog.Default().WarnContext(ctx, "slack message not delivered", "channel", channel, "attempts", attempts, "error", err)
	return "", fmt.Errorf("post to slack channel %s: %w", channel, err)
}

func (n *Notifier) count(result string) {
	if n.Metrics != nil {
		n.Metrics.Notifications.WithLabelValues(result).Inc()
	}
}

func levelEmoji(level string) string {
	switch level {
	case devicemsg.LevelCritical:
		return ":red_circle:"
	case devicemsg.LevelWarning:
		return ":warning:"
	}
	return ":information_source:"
}
