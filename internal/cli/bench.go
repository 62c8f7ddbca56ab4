package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/bench"
	"github.com/devicewarden/devicewarden/internal/localcluster"
)

func newBenchCmd(_ *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure DeviceWarden on a fresh local stack and print figures"}
	var o bench.QuarantineOptions
	q := &cobra.Command{
		Use:   "quarantine",
		Short: "Detect -> quarantine latency: pod status write until the DeviceTaintRule is visible",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.Devices < 1 {
				return fmt.Errorf("--devices must be >= 1")
			}
			o.Out = c.OutOrStdout()
			return bench.Quarantine(c.Context(), o)
		},
	}
	q.Flags().IntVar(&o.Devices, "devices", 64, "devices to flip Unhealthy (one pod each)")
	q.Flags().StringVar(&o.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(q)
	return cmd
}
