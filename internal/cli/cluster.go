//go:build !lean

package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/localcluster"
)

func newClusterCmd(g *globals) *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{Use: "cluster", Short: "Run a local Kubernetes control plane (etcd, apiserver, scheduler, controller-manager, kwok)"}
	cmd.PersistentFlags().StringVar(&cacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	builder := func(c *cobra.Command) *localcluster.Builder {
		return &localcluster.Builder{CacheDir: cacheDir, Out: c.OutOrStdout()}
	}
	var tools []string
	var toolsOnly bool
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the pinned control-plane binaries from the Go module proxy (skips what is cached)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if toolsOnly {
				if len(tools) == 0 {
					return fmt.Errorf("--tools-only needs --tools")
				}
				return builder(c).BuildTools(c.Context(), tools...)
			}
			return builder(c).Build(c.Context(), tools...)
		},
	}
	build.Flags().StringSliceVar(&tools, "tools", nil, "optional tools to build as well (prometheus: for the rollout's PromQL gate tests; helm: for the chart; temporal-server: the stock Temporal server and its SQL tool, for the tests on PostgreSQL)")
	build.Flags().BoolVar(&toolsOnly, "tools-only", false, "build only the --tools, not the control plane")
	cmd.AddCommand(build, &cobra.Command{
		Use:   "up",
		Short: "Build what is missing and start the local cluster in the background",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if _, running, err := localcluster.Status(clusterDir(g)); err != nil {
				return err
			} else if running {
				fmt.Fprintf(c.OutOrStdout(), "already running; kubeconfig: %s\n", localcluster.KubeconfigPath(clusterDir(g)))
				return nil
			}
			_, err := localcluster.Start(c.Context(), localcluster.Options{Dir: clusterDir(g), Builder: builder(c), Out: c.OutOrStdout(), Detach: true})
			return err
		},
	}, &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster (its data stays in --state-dir)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return localcluster.Down(clusterDir(g)) },
	}, &cobra.Command{
		Use:   "status",
		Short: "Say whether the local cluster is running",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			st, running, err := localcluster.Status(clusterDir(g))
			if err != nil {
				return err
			}
			if !running {
				fmt.Fprintln(c.OutOrStdout(), "stopped")
				return nil
			}
			fmt.Fprintf(c.OutOrStdout(), "running at %s\nkubeconfig: %s\n", st.Server, localcluster.KubeconfigPath(clusterDir(g)))
			return nil
		},
	}, &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the path of the local cluster's admin kubeconfig",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := filepath.Abs(localcluster.KubeconfigPath(clusterDir(g)))
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), p)
			return nil
		},
	})
	return cmd
}
