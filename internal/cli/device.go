package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/workflows"
)

// clientFlags reach a running Temporal (the one `devicewarden dev` embeds, by default).
type clientFlags struct{ o app.TemporalOptions }

func (f *clientFlags) add(cmd *cobra.Command) {
	addConnFlags(cmd.PersistentFlags(), &f.o, "127.0.0.1:7233", "host:port of the Temporal frontend (default: the server devicewarden dev embeds)")
}

// queryJSON runs a workflow's `state` query and prints the answer as JSON.
func (f *clientFlags) queryJSON(c *cobra.Command, g *globals, workflowID string, into any) error {
	tc, err := f.dial(c, g)
	if err != nil {
		return err
	}
	defer tc.Close()
	v, err := tc.QueryWorkflow(c.Context(), workflowID, "", workflows.QueryState)
	if err != nil {
		return fmt.Errorf("query %s: %w", workflowID, err)
	}
	if err := v.Get(into); err != nil {
		return err
	}
	return printJSON(c.OutOrStdout(), into)
}

func (f *clientFlags) dial(c *cobra.Command, g *globals) (client.Client, error) {
	return app.Dial(c.Context(), f.o, g.logger)
}

func newDeviceCmd(g *globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "device", Short: "List devices and their states, show one, or send it an operator signal"}
	cf.add(cmd)
	var state string
	list := &cobra.Command{
		Use:   "list",
		Short: "List devices that have a workflow, from Temporal visibility",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			return listDevices(c, tc, cf.o.Namespace, state)
		},
	}
	list.Flags().StringVar(&state, "state", "", "only devices in this state (Healthy, Suspect, Restricted, Quarantined, ...)")
	show := &cobra.Command{
		Use:   "show DRIVER/POOL/DEVICE",
		Short: "Print a device's full state (the workflow's `state` query) as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := device.ParseID(args[0])
			if err != nil {
				return err
			}
			return cf.queryJSON(c, g, id.WorkflowID(), &policy.DeviceState{})
		},
	}
	var actor, reason string
	var dur time.Duration
	signal := &cobra.Command{
		Use:   "signal DRIVER/POOL/DEVICE force-quarantine|extend|pause|resume|release-approval",
		Short: "Send an operator signal to a device's workflow",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := device.ParseID(args[0])
			if err != nil {
				return err
			}
			if !validSignal(args[1]) {
				return fmt.Errorf("signal %q: want one of %v", args[1], workflows.OperatorSignals)
			}
			if actor == "" {
				return fmt.Errorf("--actor is required: every operator action is audited")
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			cmd := policy.Command{Actor: actor, Reason: reason, Duration: dur}
			if err := tc.SignalWorkflow(c.Context(), id.WorkflowID(), "", args[1], cmd); err != nil {
				return fmt.Errorf("signal %s: %w", id.WorkflowID(), err)
			}
			fmt.Fprintf(c.OutOrStdout(), "sent %s to %s\n", args[1], id.WorkflowID())
			return nil
		},
	}
	signal.Flags().StringVar(&actor, "actor", "", "who is acting (recorded in the audit trail)")
	signal.Flags().StringVar(&reason, "reason", "", "why")
	signal.Flags().DurationVar(&dur, "duration", 0, "for extend: how much longer (default: one lease)")
	cmd.AddCommand(list, show, signal)
	return cmd
}

func validSignal(s string) bool {
	for _, n := range workflows.OperatorSignals {
		if n == s {
			return true
		}
	}
	return false
}

func listDevices(c *cobra.Command, tc client.Client, namespace, state string) error {
	query := "WorkflowType = 'DeviceWorkflow' AND ExecutionStatus = 'Running'"
	if state != "" {
		query += fmt.Sprintf(" AND DeviceState = '%s'", state)
	}
	w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DEVICE\tSTATE\tNODE\tSINCE")
	var token []byte
	for {
		resp, err := tc.ListWorkflow(c.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("list device workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			fields := e.GetSearchAttributes().GetIndexedFields()
			attr := func(name string) string {
				var v string
				if p, ok := fields[name]; ok {
					_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
				}
				return v
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", attr("DeviceID"), attr("DeviceState"), attr("DeviceNode"), e.GetStartTime().AsTime().Format(time.RFC3339))
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return w.Flush()
}

func newBreakerCmd(g *globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "breaker", Short: "Inspect, resume or pause the fleet-wide circuit breaker"}
	cf.add(cmd)
	var actor, reason string
	status := &cobra.Command{
		Use: "status", Short: "Print the breaker's state as JSON", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return cf.queryJSON(c, g, workflows.BreakerWorkflowID, &policy.BreakerState{})
		},
	}
	send := func(name string) *cobra.Command {
		sc := &cobra.Command{
			Use: name, Args: cobra.NoArgs,
			Short: map[string]string{"resume": "Re-arm an open breaker", "pause": "Open the breaker by hand: no automatic actions"}[name],
			RunE: func(c *cobra.Command, _ []string) error {
				if actor == "" {
					return fmt.Errorf("--actor is required: every operator action is audited")
				}
				tc, err := cf.dial(c, g)
				if err != nil {
					return err
				}
				defer tc.Close()
				// Signal-with-start: pausing must work even before the first permit started the breaker.
				opts := client.StartWorkflowOptions{ID: workflows.BreakerWorkflowID, TaskQueue: workflows.TaskQueue}
				if _, err := tc.SignalWithStartWorkflow(c.Context(), workflows.BreakerWorkflowID, name,
					workflows.BreakerSignal{Actor: actor, Reason: reason}, opts, workflows.BreakerWorkflow, workflows.BreakerInput{}); err != nil {
					return fmt.Errorf("signal breaker: %w", err)
				}
				fmt.Fprintf(c.OutOrStdout(), "sent %s to %s\n", name, workflows.BreakerWorkflowID)
				return nil
			},
		}
		sc.Flags().StringVar(&actor, "actor", "", "who is acting (recorded)")
		sc.Flags().StringVar(&reason, "reason", "", "why")
		return sc
	}
	cmd.AddCommand(status, send(workflows.SignalBreakerResume), send(workflows.SignalBreakerPause))
	return cmd
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
