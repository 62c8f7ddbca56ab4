package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/capacitycheck"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// exitError ends the command with a given exit code (after printing its output).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newCapacityCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "capacity", Short: "Check shared-capacity allocations against their invariants"}
	var k kubeFlags
	var tenantsPath, output string
	var record bool
	var ownNamespace string
	check := &cobra.Command{
		Use:   "check",
		Short: "List every oversold device, share outside its granted request policy, duplicate ShareID, DistinctAttribute breach and forbidden class; the exit code is how many (at most 100)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			var in capacity.CheckInput
			if tenantsPath != "" {
				t, err := loadTenants(tenantsPath)
				if err != nil {
					return err
				}
				in.Tenants = t
			}
			in.Record = record
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			rep, err := capacitycheck.Check(c.Context(), cs, kubeobj.Own(ownNamespace), in)
			if err != nil {
				return err
			}
			if output == "json" {
				if err := printJSON(c.OutOrStdout(), rep); err != nil {
					return err
				}
			} else {
				w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "INVARIANT\tCLAIM\tSHARE\tDEVICE\tDETAIL")
				for _, v := range rep.Violations {
					fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\t%s\n", v.Invariant, v.Namespace, v.Claim, dash(v.ShareID), v.Device, v.Detail)
				}
				if err := w.Flush(); err != nil {
					return err
				}
				for _, u := range rep.Unknown {
					fmt.Fprintf(c.OutOrStdout(), "Unknown: claim %s/%s (shares %v) on %s: %s\n", u.Namespace, u.Claim, u.ShareIDs, u.Node, u.Reason)
				}
				fmt.Fprintf(c.OutOrStdout(), "%d violations over %d claims and %d devices", len(rep.Violations), rep.Claims, rep.Devices)
				if record {
					fmt.Fprintf(c.OutOrStdout(), "; %d grants recorded", rep.Recorded)
				}
				fmt.Fprintln(c.OutOrStdout())
			}
			if n := len(rep.Violations); n > 0 {
				return &exitError{code: min(n, 100), msg: fmt.Sprintf("%d capacity invariant violations", n)}
			}
			return nil
		},
	}
	k.add(check)
	check.Flags().StringVar(&tenantsPath, "tenants", "", "tenants file: the classes each restricted namespace may claim")
	check.Flags().BoolVar(&record, "record", false, "record the request policy of each newly seen share (ConfigMap devicewarden-grant-<claim UID> in --own-namespace, where tenants cannot write), and delete the records of claims that are gone")
	check.Flags().StringVar(&ownNamespace, "own-namespace", "default", "DeviceWarden's own namespace, where grant records are kept")
	check.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.AddCommand(check, newCapacityFitCmd(g), newCapacityFenceCmd(g), newCapacityHygieneCmd(g))
	return cmd
}

func newCapacityFitCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var claimsPath, node, output string
	var ignoreTaints bool
	var target float64
	cmd := &cobra.Command{
		Use:   "fit",
		Short: "Would these claims (one Pod's) fit now? Asks the scheduler's own allocator, node by node, over the cluster's slices, classes, allocations and taint rules",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			if target <= 0 || target > 1 {
				return fmt.Errorf("--target %v: want a utilisation above 0 and at most 1", target)
			}
			claims, err := loadClaims(claimsPath)
			if err != nil {
				return err
			}
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			cl, err := kubeobj.CapacityCluster(c.Context(), cs)
			if err != nil {
				return err
			}
			fits, err := capacity.Fit(c.Context(), cl, claims, node, ignoreTaints)
			if err != nil {
				return err
			}
			n := 0
			for _, f := range fits {
				if f.Fits {
					n++
				}
			}
			sum := capacity.Summarize(cl.Slices, cl.Claims, target)
			if output == "json" {
				if err := printJSON(c.OutOrStdout(), map[string]any{"nodes": fits, "fitsOn": n, "capacity": sum}); err != nil {
					return err
				}
			} else {
				w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NODE\tFITS\tDEVICES")
				for _, f := range fits {
					fmt.Fprintf(w, "%s\t%t\t%s\n", f.Node, f.Fits, capacity.Devices(f))
				}
				for _, s := range sum {
					fmt.Fprintf(w, "capacity %s\t%d shared devices\ttotal %s, schedulable at %.0f%% %s, used %s, free %s, fragmented %s\n", s.Capacity, s.Devices,
						capacity.Bytes(s.Total), s.Target*100, capacity.Bytes(s.Schedulable), capacity.Bytes(s.Used), capacity.Bytes(s.Free), capacity.Bytes(s.Fragmented))
				}
				if err := w.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "the claims fit on %d of %d nodes\n", n, len(fits))
			}
			if n == 0 {
				return &exitError{code: 1, msg: "the claims fit on no node"}
			}
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().StringVar(&claimsPath, "claims", "", "YAML file of ResourceClaims (--- between them), as one Pod would ask")
	cmd.Flags().StringVar(&node, "node", "", "only this node")
	cmd.Flags().BoolVar(&ignoreTaints, "ignore-taints", false, "answer as if no DeviceTaintRule existed")
	cmd.Flags().Float64Var(&target, "target", 0.7, "target utilisation for the schedulable-capacity figure")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	_ = cmd.MarkFlagRequired("claims")
	return cmd
}

func newCapacityFenceCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var in capacity.FenceInput
	cmd := &cobra.Command{
		Use:   "fence NODE",
		Short: "Confirm that a node which stopped renewing its Lease is down for good, so what was allocated there may be reclaimed (--undo takes it back)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if in.Actor == "" && !in.Undo {
				return fmt.Errorf("--actor is required: every operator action is audited")
			}
			in.Node = args[0]
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			if err := capacitycheck.FenceNode(c.Context(), cs, in); err != nil {
				return err
			}
			verb := "fenced"
			if in.Undo {
				verb = "no longer fenced"
			}
			fmt.Fprintf(c.OutOrStdout(), "node %s %s\n", in.Node, verb)
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().StringVar(&in.Actor, "actor", "", "who confirms (recorded on the node)")
	cmd.Flags().BoolVar(&in.Undo, "undo", false, "take the confirmation back")
	return cmd
}
