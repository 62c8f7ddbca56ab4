//go:build !lean

package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/blang/semver/v4"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/sim"
)

func newSimPoolCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var o sim.PoolOptions
	cmd := &cobra.Command{
		Use:   "pool NAME",
		Short: "Create a pool of kwok GPU nodes owned by the simulated device plugin (" + sim.GPUPluginResource + "), ready for a rollout to move to DRA",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if o.Count < 1 || o.GPUs < 1 || o.GPUs > 128 {
				return fmt.Errorf("--count must be >= 1 and --gpus between 1 and 128")
			}
			if o.Unenforced && !o.Shared {
				return fmt.Errorf("--unenforced needs --shared: only shared devices have shares to enforce")
			}
			if o.DriverVersion != "" {
				if _, err := semver.Parse(o.DriverVersion); err != nil {
					return fmt.Errorf("--driver-version %q: want a semantic version such as 1.2.0", o.DriverVersion)
				}
			}
			o.Pool = args[0]
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			names, err := sim.CreatePool(c.Context(), cs, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "pool %s: %d nodes (%s=%s, %s=%s) with %d GPUs each: %v\n", o.Pool, len(names), sim.LabelPool, o.Pool, sim.LabelOwner, sim.OwnerPlugin, o.GPUs, names)
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().IntVar(&o.Count, "count", 2, "nodes in the pool")
	cmd.Flags().IntVar(&o.GPUs, "gpus", 8, "GPUs per node")
	cmd.Flags().BoolVar(&o.Shared, "shared", false, "under DRA, publish shared devices: allowMultipleAllocations and "+sim.SharedMemory+" of memory taken in steps of "+sim.SharedMin)
	cmd.Flags().BoolVar(&o.Unenforced, "unenforced", false, "with --shared, a driver that does not hold tenants to their shares (the simulated load test shows a noisy tenant taking more)")
	cmd.Flags().StringVar(&o.DriverVersion, "driver-version", "", "the driverVersion attribute the DRA driver publishes on each device, e.g. 1.2.0")
	cmd.Flags().StringVar(&o.NodeType, "node-type", "", "the nodes' "+sim.LabelNodeType+" label")
	return cmd
}

func newSimMisbehaveCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var delay time.Duration
	var drift int
	var ignoreLabel, reset, unenforced bool
	cmd := &cobra.Command{
		Use:   "misbehave NODE",
		Short: "Make the simulated drivers misbehave on a pool node: publish late, publish fewer devices than the node has, or publish whatever the ownership label says",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if delay < 0 || drift < 0 {
				return fmt.Errorf("--publish-delay and --drift must not be negative")
			}
			ann := map[string]any{sim.AnnotationPublishDelay: nil, sim.AnnotationDrift: nil, sim.AnnotationIgnoreLabel: nil, sim.AnnotationUnenforced: nil}
			if !reset {
				if delay > 0 {
					ann[sim.AnnotationPublishDelay] = delay.String()
				}
				if drift > 0 {
					ann[sim.AnnotationDrift] = fmt.Sprint(drift)
				}
				if ignoreLabel {
					ann[sim.AnnotationIgnoreLabel] = "true"
				}
				if unenforced {
					ann[sim.AnnotationUnenforced] = "true"
				}
			}
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
			if _, err := cs.CoreV1().Nodes().Patch(c.Context(), args[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("node %s: %w", args[0], err)
			}
			fmt.Fprintf(c.OutOrStdout(), "node %s: publish-delay %s, drift %d, ignore-label %t, unenforced %t\n", args[0], delay, drift, ignoreLabel, unenforced)
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().DurationVar(&delay, "publish-delay", 0, "publish the node's ResourceSlice only this long after it is labelled for DRA")
	cmd.Flags().IntVar(&drift, "drift", 0, "publish this many devices fewer than the node has")
	cmd.Flags().BoolVar(&ignoreLabel, "ignore-label", false, "publish the node's slice whatever its ownership label says (double ownership)")
	cmd.Flags().BoolVar(&unenforced, "unenforced", false, "publish shared devices without holding tenants to their shares")
	cmd.Flags().BoolVar(&reset, "reset", false, "behave again")
	return cmd
}
