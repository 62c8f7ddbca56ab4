package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// clientFlags reach a running Temporal (the one `devicewarden dev` embeds, by default).
type clientFlags struct{ o app.TemporalOptions }

func (f *clientFlags) add(cmd *cobra.Command) {
	addConnFlags(cmd.PersistentFlags(), &f.o, "127.0.0.1:7233", "host:port of the Temporal frontend (default: the server devicewarden dev embeds)")
}

// queryJSON runs a workflow's `state` query and prints the answer as JSON.
func (f *clientFlags) queryJSON(c *cobra.Command, g *globals, workflowID string, into any) error {
	if err := f.query(c, g, workflowID, into); err != nil {
		return err
	}
	return printJSON(c.OutOrStdout(), into)
}

// query runs a workflow's `state` query.
func (f *clientFlags) query(c *cobra.Command, g *globals, workflowID string, into any) error {
	tc, err := f.dial(c, g)
	if err != nil {
		return err
	}
	defer tc.Close()
	v, err := tc.QueryWorkflow(c.Context(), workflowID, "", api.QueryState)
	if err != nil {
		return fmt.Errorf("query %s: %w", workflowID, err)
	}
	return v.Get(into)
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
	var output string
	show := &cobra.Command{
		Use:   "show DRIVER/POOL/DEVICE",
		Short: "Print what a person needs about a device: state, reason, actor, expiry, reports, transitions, what happens next",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := device.ParseID(args[0])
			if err != nil {
				return err
			}
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			if id, err = cf.deciderOf(c, g, id); err != nil {
				return err
			}
			if output == "json" {
				// The workflow's whole record, as it keeps it.
				var raw json.RawMessage
				return cf.queryJSON(c, g, id.WorkflowID(), &raw)
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			v, err := api.QueryDevice(c.Context(), tc, id.WorkflowID(), "")
			if err != nil {
				return err
			}
			return printDevice(c.OutOrStdout(), &v)
		},
	}
	show.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	var actor, reason, policyFile string
	var kf kubeFlags
	var dur time.Duration
	signal := &cobra.Command{
		Use:   "signal DRIVER/POOL/DEVICE " + strings.Join(api.OperatorSignals, "|"),
		Short: "Send an operator signal (fire-and-forget; prefer the commands, which answer)",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			id, err := device.ParseID(args[0])
			if err != nil {
				return err
			}
			if !validSignal(args[1]) {
				return fmt.Errorf("signal %q: want one of %v", args[1], api.OperatorSignals)
			}
			if actor == "" {
				return fmt.Errorf("--actor is required: every operator action is audited")
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			cmd := devicemsg.Command{Actor: actor, Reason: reason, Duration: policy.JSONDuration(dur)}
			if err := tc.SignalWorkflow(c.Context(), id.WorkflowID(), "", args[1], cmd); err != nil {
				return fmt.Errorf("signal %s: %w", id.WorkflowID(), err)
			}
			fmt.Fprintf(c.OutOrStdout(), "sent %s to %s\n", args[1], id.WorkflowID())
			return nil
		},
	}
	signal.Flags().StringVar(&actor, "actor", "", "who is acting (recorded in the audit trail)")
	signal.Flags().StringVar(&reason, "reason", "", "why")
	signal.Flags().DurationVar(&dur, "duration", 0, "for extend: how much longer, e.g. 48h (default: one lease)")
	cmd.AddCommand(list, show, signal)
	for _, k := range []struct {
		kind  devicemsg.CommandKind
		use   string
		short string
	}{
		{devicemsg.CmdForceQuarantine, "quarantine", "Quarantine a device now (starts its workflow if it has none, e.g. a suspected silent data corruption)"},
		{devicemsg.CmdRelease, "release", "Start the device's recovery review now: probe, probation with a canary, stability window (refused while the last probe failed)"},
		{devicemsg.CmdExtend, "extend", "Keep a quarantine longer (--duration, default one lease)"},
		{devicemsg.CmdPause, "pause", "Stop automatic actions for the device"},
		{devicemsg.CmdResume, "resume", "Resume automatic actions for the device"},
		{devicemsg.CmdApprove, "approve", "Approve a release, or a repair step, that waits for approval"},
		{devicemsg.CmdReject, "reject", "Reject a release or a repair step that waits for approval (the device stays quarantined)"},
	} {
		k := k
		sub := &cobra.Command{
			Use: k.use + " DRIVER/POOL/DEVICE", Short: k.short, Args: cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				id, err := device.ParseID(args[0])
				if err != nil {
					return err
				}
				if actor == "" {
					return fmt.Errorf("--actor is required: every operator action is audited")
				}
				if dur != 0 && k.kind != devicemsg.CmdExtend {
					return fmt.Errorf("--duration is only for extend")
				}
				cmd := devicemsg.Command{Kind: k.kind, Actor: actor, Reason: reason, Duration: policy.JSONDuration(dur)}
				var start *api.DeviceInput
				if k.kind == devicemsg.CmdForceQuarantine {
					pol := policy.DefaultSet()
					if policyFile != "" {
						if pol, err = policy.LoadFile(policyFile); err != nil {
							return err
						}
					}
					if start, err = cf.quarantineStart(c, g, &kf, id, pol); err != nil {
						return err
					}
					id = start.Device
				}
				if start == nil {
					// A partition's command goes to its physical unit's workflow.
					if id, err = cf.deciderOf(c, g, id); err != nil {
						return err
					}
				}
				tc, err := cf.dial(c, g)
				if err != nil {
					return err
				}
				defer tc.Close()
				res, err := api.SendCommand(c.Context(), tc, id, cmd, start)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: %s (%s)\n", id, res.State, res.Message)
				return nil
			},
		}
		sub.Flags().StringVar(&actor, "actor", "", "who is acting (recorded in the audit trail)")
		sub.Flags().StringVar(&reason, "reason", "", "why")
		if k.kind == devicemsg.CmdExtend {
			sub.Flags().DurationVar(&dur, "duration", 0, "how much longer, e.g. 48h (default: one lease)")
		}
		if k.kind == devicemsg.CmdForceQuarantine {
			sub.Flags().StringVar(&policyFile, "policy", "", "policy file whose units say how a partitionable GPU's forms group (default: built-in); the fence runs under the running DeviceWarden's policy")
			kf.add(sub)
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

func validSignal(s string) bool {
	for _, n := range api.OperatorSignals {
		if n == s {
			return true
		}
	}
	return false
}

func listDevices(c *cobra.Command, tc client.Client, namespace, state string) error {
	query := api.RunningDevicesQuery
	if state != "" {
		query += fmt.Sprintf(" AND DeviceState = '%s'", state)
	}
	w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DEVICE\tFORMS\tSTATE\tNODE\tSINCE")
	err := eachWorkflow(c.Context(), tc, namespace, query, func(e *workflowpb.WorkflowExecutionInfo) {
		fields := e.GetSearchAttributes().GetIndexedFields()
		attr := func(name string) string {
			var v string
			if p, ok := fields[name]; ok {
				_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
			}
			return v
		}
		forms := "1"
		if p, ok := fields["DeviceForms"]; ok {
			var list []string
			_ = converter.GetDefaultDataConverter().FromPayload(p, &list)
			forms = strconv.Itoa(len(list))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", attr("DeviceID"), forms, attr("DeviceState"), attr("DeviceNode"), e.GetStartTime().AsTime().Format(time.RFC3339))
	})
	if err != nil {
		return fmt.Errorf("list device workflows: %w", err)
	}
	return w.Flush()
}

// eachWorkflow hands every workflow that matches the visibility query to fn, page by page.
func eachWorkflow(ctx context.Context, tc client.Client, namespace, query string, fn func(*workflowpb.WorkflowExecutionInfo)) error {
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query, NextPageToken: token})
		if err != nil {
			return err
		}
		for _, e := range resp.GetExecutions() {
			fn(e)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

func newBreakerCmd(g *globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "breaker", Short: "Inspect, resume or pause the fleet-wide circuit breaker"}
	cf.add(cmd)
	var actor, reason string
	status := &cobra.Command{
		Use: "status", Short: "Print the breaker's state as JSON", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return cf.queryJSON(c, g, api.BreakerWorkflowID, &breaker.State{})
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
				sig := api.BreakerSignal{Actor: actor, Reason: reason, At: time.Now()}
				if name == api.SignalBreakerPause {
					return pauseBreaker(c, tc, sig)
				}
				if err := (&api.BreakerClient{Client: tc}).Signal(c.Context(), name, sig); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "sent %s to %s\n", name, api.BreakerWorkflowID)
				return nil
			},
		}
		sc.Flags().StringVar(&actor, "actor", "", "who is acting (recorded)")
		sc.Flags().StringVar(&reason, "reason", "", "why")
		return sc
	}
	cmd.AddCommand(status, send(api.SignalBreakerResume), send(api.SignalBreakerPause))
	return cmd
}

// PauseAnswerWithin bounds how long `breaker pause` waits for the breaker to revoke leased permits.
const PauseAnswerWithin = 20 * time.Second

// pauseBreaker opens the breaker with the pause update, which answers once every worker gave back
// the permits it leased ahead (or they ran out): from then on no automatic action starts.
func pauseBreaker(c *cobra.Command, tc client.Client, sig api.BreakerSignal) error {
	// The signal first: it opens the breaker even when no worker runs yet to answer an update.
	bc := &api.BreakerClient{Client: tc}
	if err := bc.Signal(c.Context(), api.SignalBreakerPause, sig); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context(), PauseAnswerWithin)
	defer cancel()
	st, err := bc.Pause(ctx, sig)
	if err != nil {
		// The signal paused the breaker; only the wait for the revocation did not end.
		fmt.Fprintf(c.OutOrStdout(), "sent pause to %s; the breaker did not confirm that every leased permit is revoked (%v): it revokes them when a worker runs\n",
			api.BreakerWorkflowID, err)
		return nil
	}
	leased := 0
	for _, l := range st.Leases {
		leased += l.Count
	}
	fmt.Fprintf(c.OutOrStdout(), "paused %s: %d automatic actions in the window, %d leased permits not reported (counted as used); no worker can take another\n",
		api.BreakerWorkflowID, len(st.Grants), leased)
	return nil
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
