package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/console"
)

// consoleFlags are the fleet page's flags.
type consoleFlags struct {
	listen  string
	refresh time.Duration
}

func (f *consoleFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.listen, "console-listen", "127.0.0.1:8235", "address of the read-only fleet page (empty turns it off)")
	cmd.Flags().DurationVar(&f.refresh, "console-refresh", time.Second, "the fleet page reads Temporal and the cluster at most once per this, however many people look")
}

func (f *consoleFlags) validate() error {
	if f.refresh < 100*time.Millisecond {
		return fmt.Errorf("--console-refresh must be at least 100ms, got %s", f.refresh)
	}
	if f.listen == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return fmt.Errorf("--console-listen %q: %w", f.listen, err)
	}
	return nil
}

// addConsole serves the fleet page beside the controller.
func (f *consoleFlags) addConsole(o *app.ControllerOptions, tc client.Client, kube kubernetes.Interface, uiURL string, logger *slog.Logger) {
	if f.listen == "" {
		return
	}
	cluster := &console.KubeCluster{Kube: kube, PoolLabels: o.NodePoolLabels}
	fleet := &console.TemporalFleet{Client: tc, Namespace: o.Namespace}
	s := &console.Server{
		Cache:       &console.Cache{Fleet: fleet, Cluster: cluster, History: fleet, Refresh: f.refresh},
		Flows:       fleet,
		Events:      cluster.Events,
		UIURL:       uiURL,
		Namespace:   o.Namespace,
		PageRefresh: max(time.Second, f.refresh),
		Logger:      logger,
	}
	o.Extra = append(o.Extra, func(ctx context.Context) error { return s.Serve(ctx, f.listen) })
}
