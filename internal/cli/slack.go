package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/internal/slackapp"
)

// slackFlags configure the Slack app: notifications, approval requests and the approvals endpoint.
type slackFlags struct {
	token, channel, apiURL, uiURL string
	signingSecret, listen         string
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

// approvalsServer is the interactivity endpoint, or nil when no signing secret is set.
func (f *slackFlags) approvalsServer(tc client.Client, logger *slog.Logger) (*slackapp.Server, error) {
	if f.signingSecret == "" {
		return nil, nil
	}
	if len(f.allowedUsers) == 0 && f.allowedGroup == "" {
		return nil, errors.New("approvals: set --slack-approvers or --slack-approver-group: nobody may approve otherwise")
	}
	var c *slack.Client // without a token the outcome is only logged, the message not updated
	if f.token != "" {
		c = slackapp.NewClient(f.token, f.apiURL)
	}
	return &slackapp.Server{SigningSecret: f.signingSecret, Client: c, Decider: slackapp.TemporalDecider{Client: tc},
		AllowedUsers: f.allowedUsers, AllowedGroup: f.allowedGroup, Logger: logger.With("component", "approvals")}, nil
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
		Short: "Serve Slack's interactivity endpoint: Approve and Reject buttons become commands to device workflows",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			logConfig(g.logger, c)
			if sf.signingSecret == "" {
				return errors.New("--slack-signing-secret is required")
			}
			if len(sf.allowedUsers) == 0 && sf.allowedGroup == "" {
				return errors.New("approvals: set --slack-approvers or --slack-approver-group: nobody may approve otherwise")
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			s, err := sf.approvalsServer(tc, g.logger)
			if err != nil {
				return err
			}
			return serveApprovals(c.Context(), sf.listen, s, g.logger)
		},
	}
	cf.add(cmd)
	sf.addNotify(cmd)
	sf.addApprovals(cmd, "127.0.0.1:8090")
	return cmd
}
