package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/slackapp"
)

// slackFlags configure the Slack app: notifications, approval requests and the approvals endpoint.
type slackFlags struct {
	token, channel, apiURL, uiURL string
	signingSecret, listen         string
	appToken                      string
	allowedUsers                  []string
	allowedGroup                  string
}

func (f *slackFlags) addNotify(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.token, "slack-token", "", "Slack bot token: notifications and approval requests go to Slack (empty: log only)")
	cmd.Flags().StringVar(&f.channel, "slack-channel", "", "Slack channel for policies that name none")
	cmd.Flags().StringVar(&f.apiURL, "slack-api-url", "", "Slack Web API address (default Slack's; for a proxy)")
	cmd.Flags().StringVar(&f.uiURL, "temporal-ui-url", "", "Temporal Web UI address, for links in Slack messages")
}

func (f *slackFlags) addApprovals(cmd *cobra.Command, listen string) {
	cmd.Flags().StringVar(&f.signingSecret, "slack-signing-secret", "", "Slack app signing secret: verifies interactivity requests")
	cmd.Flags().StringVar(&f.listen, "approvals-listen", listen, "address of Slack's interactivity endpoint (/slack/interactivity)")
	cmd.Flags().StringVar(&f.appToken, "slack-app-token", "", "Slack app-level token (xapp-): take button presses over Socket Mode, with no public endpoint")
	cmd.Flags().StringSliceVar(&f.allowedUsers, "slack-approvers", nil, "Slack user IDs allowed to approve or reject releases")
	cmd.Flags().StringVar(&f.allowedGroup, "slack-approver-group", "", "Slack user group ID whose members may approve or reject")
}

// notifier is the Slack notifier, or nil without a token.
func (f *slackFlags) notifier(namespace string) *slackapp.Notifier {
	if f.token == "" {
		return nil
	}
	return &slackapp.Notifier{Client: slackapp.NewClient(f.token, f.apiURL), Channel: f.channel, UIURL: f.uiURL, Namespace: namespace}
}

// approvalsServer handles Slack's button presses, or is nil when neither a signing secret (the
// HTTP endpoint) nor an app-level token (Socket Mode) is set. Served requests are remembered as
// Leases in ownNamespace when kube is given, so a replica or a restart refuses a replay too.
func (f *slackFlags) approvalsServer(tc client.Client, kube kubernetes.Interface, ownNamespace string, logger *slog.Logger) (*slackapp.Server, error) {
	if f.signingSecret == "" && f.appToken == "" {
		return nil, nil
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	var c *slack.Client // without a token the outcome is only logged, the message not updated
	switch {
	case f.appToken != "":
		c = slackapp.NewSocketClient(f.token, f.appToken, f.apiURL)
	case f.token != "":
		c = slackapp.NewClient(f.token, f.apiURL)
	}
	s := &slackapp.Server{SigningSecret: f.signingSecret, Client: c, Decider: slackapp.TemporalDecider{Client: tc},
		AllowedUsers: f.allowedUsers, AllowedGroup: f.allowedGroup, Logger: logger.With("component", "approvals")}
	if kube != nil {
		s.Replays = &slackapp.LeaseReplays{Kube: kube, Namespace: ownNamespace}
	}
	return s, nil
}

// validate refuses approval settings that would let nobody approve, or a bot token where the
// app-level token belongs.
func (f *slackFlags) validate() error {
	if f.signingSecret == "" && f.appToken == "" {
		return nil
	}
	if len(f.allowedUsers) == 0 && f.allowedGroup == "" {
		return errors.New("approvals: set --slack-approvers or --slack-approver-group: nobody may approve otherwise")
	}
	if f.appToken != "" && !strings.HasPrefix(f.appToken, "xapp-") {
		return errors.New("--slack-app-token: want an app-level token (xapp-...), not a bot token")
	}
	return nil
}

// approvalRunners are what serve s until ctx ends: the HTTP endpoint with a signing secret,
// Socket Mode with an app-level token (both when both are set).
func (f *slackFlags) approvalRunners(s *slackapp.Server, logger *slog.Logger) []func(context.Context) error {
	var out []func(context.Context) error
	if f.signingSecret != "" {
		out = append(out, func(ctx context.Context) error { return serveApprovals(ctx, f.listen, s, logger) })
	}
	if f.appToken != "" {
		out = append(out, func(ctx context.Context) error { return s.RunSocketMode(ctx, s.Client) })
	}
	return out
}

// serveApprovals serves the endpoint until ctx ends.
func serveApprovals(ctx context.Context, addr string, s *slackapp.Server, logger *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/slack/interactivity", s)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for Slack approvals on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	logger.Info("serving Slack approvals", "address", "http://"+ln.Addr().String()+"/slack/interactivity")
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		s.Wait()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newApprovalsCmd(g *globals) *cobra.Command {
	var cf clientFlags
	var sf slackFlags
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "Take Slack's Approve and Reject presses (the HTTP endpoint or Socket Mode) as commands to device and rollout workflows",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			logConfig(g.logger, c)
			if sf.signingSecret == "" && sf.appToken == "" {
				return errors.New("--slack-signing-secret (the HTTP endpoint) or --slack-app-token (Socket Mode) is required")
			}
			if err := sf.validate(); err != nil {
				return err
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			s, err := sf.approvalsServer(tc, nil, "", g.logger) // no cluster here: replays are remembered in this process
			if err != nil {
				return err
			}
			eg, ctx := errgroup.WithContext(c.Context())
			for _, run := range sf.approvalRunners(s, g.logger) {
				eg.Go(func() error { return run(ctx) })
			}
			return eg.Wait()
		},
	}
	cf.add(cmd)
	sf.addNotify(cmd)
	sf.addApprovals(cmd, "127.0.0.1:8090")
	return cmd
}
