package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/activities"
	"github.com/devicewarden/devicewarden/internal/capacity"
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
	check := &cobra.Command{
		Use:   "check",
		Short: "List every oversold device, share outside its granted request policy, duplicate ShareID, DistinctAttribute breach and forbidden class; the exit code is how many (at most 100)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			var in activities.CapacityInput
			if tenantsPath != "" {
				t, err := capacity.LoadTenants(tenantsPath)
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
			rep, err := (&activities.Activities{Kube: cs}).CheckCapacity(c.Context(), in)
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
					share := v.ShareID
					if share == "" {
						share = "-"
					}
					fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\t%s\n", v.Invariant, v.Namespace, v.Claim, share, v.Device, v.Detail)
				}
				if err := w.Flush(); err != nil {
					return err
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
	check.Flags().BoolVar(&record, "record", false, "record the request policy of each newly seen share on its claim (annotation "+capacity.AnnotationGranted+")")
	check.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.AddCommand(check)
	return cmd
}
