package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

func newRolloutCmd(g *globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "rollout", Short: "Move node pools from the device plugin to DRA, a gated phase at a time"}
	cf.add(cmd)
	var planPath string
	check := &cobra.Command{
		Use: "check", Short: "Read and check a plan file; print the phases it would run", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := rolloutplan.LoadFile(planPath)
			if err != nil {
				return err
			}
			return printPlan(c.OutOrStdout(), p)
		},
	}
	check.Flags().StringVar(&planPath, "plan", "", "plan file (YAML)")
	_ = check.MarkFlagRequired("plan")
	start := &cobra.Command{
		Use: "start", Short: "Start the plan's rollout now (workflow rollout/<name>)", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := rolloutplan.LoadFile(planPath)
			if err != nil {
				return err
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			run, err := api.StartRollout(c.Context(), tc, p)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "rollout %s started (workflow %s, run %s)\n", p.Name, run.GetID(), run.GetRunID())
			return nil
		},
	}
	start.Flags().StringVar(&planPath, "plan", "", "plan file (YAML)")
	_ = start.MarkFlagRequired("plan")
	var asJSON bool
	status := &cobra.Command{
		Use: "status NAME", Short: "Print where a rollout stands: phase, step, state, gate reports, log", Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var st api.RolloutStatus
			if asJSON {
				return cf.queryJSON(c, g, api.RolloutID(args[0]), &st)
			}
			if err := cf.query(c, g, api.RolloutID(args[0]), &st); err != nil {
				return err
			}
			return printRollout(c.OutOrStdout(), &st)
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the whole status as JSON")
	cmd.AddCommand(check, start, status, newRolloutScheduleCmd(g, &cf))
	for _, k := range []struct{ use, update, short string }{
		{"pause NAME", api.UpdateRolloutPause, "Hold the rollout before its next step (a soak keeps its clock)"},
		{"resume NAME", api.UpdateRolloutResume, "Go on after pause; retry a blocked or rolled-back phase from preflight"},
		{"rollback NAME", api.UpdateRolloutRollback, "Roll back every enabled phase: refuse new claims for their classes, route nodes back to the plugin"},
		{"approve NAME PHASE", api.UpdateRolloutApprove, "Approve going on past PHASE (the phase waiting for approval), or let tenants into a shared PHASE whose enforcement proof failed (its classes labelled soft quota, no QoS)"},
	} {
		k := k
		var actor, reason string
		nargs := 1
		if k.update == api.UpdateRolloutApprove {
			nargs = 2
		}
		sub := &cobra.Command{
			Use: k.use, Short: k.short, Args: cobra.ExactArgs(nargs),
			RunE: func(c *cobra.Command, args []string) error {
				if actor == "" {
					return fmt.Errorf("--actor is required: every operator action is audited")
				}
				body := rolloutplan.Command{Actor: actor, Reason: reason, At: time.Now().UTC()}
				if nargs == 2 {
					body.Phase = args[1]
				}
				tc, err := cf.dial(c, g)
				if err != nil {
					return err
				}
				defer tc.Close()
				st, err := api.SendRolloutCommand(c.Context(), tc, args[0], k.update, body)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "rollout %s: %s accepted; now %s\n", args[0], k.update, summary(&st))
				return nil
			},
		}
		sub.Flags().StringVar(&actor, "actor", "", "who asks (recorded in the rollout's log)")
		sub.Flags().StringVar(&reason, "reason", "", "why")
		cmd.AddCommand(sub)
	}
	return cmd
}

func newRolloutScheduleCmd(g *globals, cf *clientFlags) *cobra.Command {
	var planPath, cron string
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Create a Temporal Schedule that opens a window on the rollout at each cron time (it enables phases only inside windows; it pauses when the rollout is rolled back or blocked)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if window <= 0 {
				return fmt.Errorf("--window %s: want a positive duration such as 2h", window)
			}
			p, err := rolloutplan.LoadFile(planPath)
			if err != nil {
				return err
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			id, err := api.ScheduleRollout(c.Context(), tc, p, cron, window)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "schedule %s created: windows of %s at %q (see: temporal schedule describe --schedule-id %s)\n", id, window, cron, id)
			return nil
		},
	}
	cmd.Flags().StringVar(&planPath, "plan", "", "plan file (YAML)")
	cmd.Flags().StringVar(&cron, "cron", "", "when windows open, as a cron expression (UTC), e.g. '0 9 * * 1-5'")
	cmd.Flags().DurationVar(&window, "window", 2*time.Hour, "how long each window stays open")
	_ = cmd.MarkFlagRequired("plan")
	_ = cmd.MarkFlagRequired("cron")
	return cmd
}

func summary(st *api.RolloutStatus) string {
	s := fmt.Sprintf("%s (phase %d, step %s)", st.State, st.Phase+1, st.Step)
	if st.State == rolloutplan.StateCompleted {
		s = string(st.State)
	}
	if st.Paused {
		s += ", paused"
	}
	return s
}

func printPlan(out io.Writer, p rolloutplan.Plan) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Plan:\t%s (switch %s: %s -> %s; plugin resource %s)\n", p.Name, p.OwnerLabel, p.Plugin, p.DRA, p.PluginResource)
	for i, ph := range p.Phases {
		fmt.Fprintf(w, "Phase %d:\t%s nodes %q classes %v tenants %v soak %s approve %t\n", i+1, ph.Name, ph.Nodes, ph.ClassNames(), ph.Namespaces, ph.Soak, ph.Approve)
		if e := ph.Enforcement; e != nil {
			fmt.Fprintf(w, "  proof:\tshared %v: %d tenants of %s %s (noisy %gx), tolerance %.0f%%, image %s, on unenforced: %s\n",
				ph.SharedClassNames(), e.Tenants, e.Share, e.Capacity, e.Noisy, 100*e.Tolerance, e.Image, e.OnUnenforced)
		}
	}
	return w.Flush()
}

func printRollout(out io.Writer, st *api.RolloutStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Rollout:\t%s\n", st.Plan)
	fmt.Fprintf(w, "State:\t%s\n", summary(st))
	if st.Awaiting != "" {
		fmt.Fprintf(w, "Awaiting approval:\tpast phase %s\n", st.Awaiting)
	}
	if !st.SoakUntil.IsZero() && st.Step == rolloutplan.StepSoak {
		fmt.Fprintf(w, "Soak until:\t%s\n", st.SoakUntil.UTC().Format(time.RFC3339))
	}
	for _, e := range st.Enabled {
		if e.Partial {
			fmt.Fprintf(w, "Enabled:\t%s partly: its enable failed at %s (resume finishes it, rollback routes its switched nodes back)\n", e.Phase, e.At.UTC().Format(time.RFC3339))
			continue
		}
		fmt.Fprintf(w, "Enabled:\t%s on %d node(s) at %s\n", e.Phase, len(e.Nodes), e.At.UTC().Format(time.RFC3339))
	}
	for _, b := range st.Blocks {
		if b.Except != "" {
			fmt.Fprintf(w, "New claims refused:\t%v (phase %s: %s; the proof's namespace %s excepted)\n", b.Classes, b.Phase, b.Reason, b.Except)
			continue
		}
		fmt.Fprintf(w, "New claims refused:\t%v (phase %s rolled back: %s)\n", b.Classes, b.Phase, b.Reason)
	}
	for _, v := range st.Violations {
		fmt.Fprintf(w, "Preflight:\t%s %s\n", v.Node, v.Reason)
	}
	for _, r := range st.Reports {
		verdict := "passed"
		if !r.Passed() {
			verdict = fmt.Sprintf("FAILED %v", r.Failed)
		}
		fmt.Fprintf(w, "Gates %s:\t%s; %d claims, claim->allocated p50 %s p99 %s, allocated->ready p50 %s p99 %s\n", r.Phase, verdict,
			r.Claims, r.ClaimToAllocated.P50, r.ClaimToAllocated.P99, r.AllocatedToReady.P50, r.AllocatedToReady.P99)
	}
	for _, p := range st.Proofs {
		printProof(w, p)
	}
	for _, q := range st.SoftQuotas {
		fmt.Fprintf(w, "Soft quota:\t%v of phase %s labelled soft quota, no QoS: approved by %s at %s (%s)\n", q.Classes, q.Phase, q.Actor, q.At.UTC().Format(time.RFC3339), q.Proof)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "Log:")
	from := max(0, len(st.Log)-15)
	for _, e := range st.Log[from:] {
		fmt.Fprintf(out, "  %s  %s\n", e.At.UTC().Format(time.RFC3339), e.Text)
	}
	return nil
}

// printProof writes an enforcement proof's verdict, inputs and per-tenant figures.
func printProof(w io.Writer, p rolloutplan.ProofReport) {
	verdict := "enforced"
	if !p.Enforced {
		verdict = "NOT ENFORCED"
	}
	fmt.Fprintf(w, "Proof %s:\t%s on %s %s (%s, class %s) at %s\n", p.Phase, verdict, p.Node, p.Device, p.Group, p.Class, p.At.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  inputs:\t%d tenants of %s of %s %s each, the noisy one trying %gx; tolerance %.0f%%; %s per load\n",
		len(p.Tenants), p.Share, p.CapacityValue, p.Capacity, p.Noisy, 100*p.Tolerance, p.Duration)
	fmt.Fprintf(w, "  baseline:\t%.1f/s p99 %.2fms drops %d errors %d\n", p.Baseline.Throughput, p.Baseline.P99Ms, p.Baseline.Drops, p.Baseline.Errors)
	for _, t := range p.Tenants {
		fmt.Fprintf(w, "  %s %s:\tShareID %s, %.0f%% of the device: %.1f/s (share %.1f/s) p99 %.2fms drops %d errors %d\n",
			t.Role, t.Pod, t.ShareID, 100*t.Fraction, t.Result.Throughput, t.Expected, t.Result.P99Ms, t.Result.Drops, t.Result.Errors)
	}
	for _, r := range p.Reasons {
		fmt.Fprintf(w, "  why:\t%s\n", r)
	}
}
