package cli

import (
	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/localcluster"
)

func newClusterCmd() *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{Use: "cluster", Short: "Run a local Kubernetes control plane (etcd, apiserver, scheduler, controller-manager, kwok)"}
	cmd.PersistentFlags().StringVar(&cacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(&cobra.Command{
		Use:   "build",
		Short: "Build the pinned control-plane binaries from the Go module proxy (skips what is cached)",
		RunE: func(c *cobra.Command, _ []string) error {
			b := &localcluster.Builder{CacheDir: cacheDir, Out: c.OutOrStdout()}
			return b.Build(c.Context())
		},
	})
	return cmd
}
