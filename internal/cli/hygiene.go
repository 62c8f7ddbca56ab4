package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/capacity"
)

// newCapacityHygieneCmd lists the claims claim hygiene follows: one open workflow per claim.
func newCapacityHygieneCmd(g *globals) *cobra.Command {
	var cf clientFlags
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:   "hygiene",
		Short: "List the claims claim hygiene follows (leaked, stuck, Unknown on a lost node, held by the breaker) with ShareIDs, version and reason",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			list, err := hygieneStates(c, tc, cf.o.Namespace, all)
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(c.OutOrStdout(), list)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CLAIM\tSTATE\tVERSION\tSHARES\tNODE\tREASON")
			for _, st := range list {
				f := st.Finding
				reason := f.Reason
				if st.Held != "" {
					reason += " (" + st.Held + ")"
				}
				fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", f.Namespace, f.Claim, st.State, f.Version, dash(strings.Join(f.ShareIDs, ",")), dash(f.Node), reason)
			}
			return w.Flush()
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().BoolVar(&all, "all", false, "also list finished workflows (deleted, gone, resolved) with their results")
	return cmd
}

// hygieneStates reads every claim-hygiene workflow from visibility: a running one answers its
// state query, a finished one with its result (one that failed or was terminated by its status).
func hygieneStates(c *cobra.Command, tc client.Client, namespace string, all bool) ([]api.ClaimHygieneStatus, error) {
	query := "WorkflowType = 'ClaimHygieneWorkflow'"
	if !all {
		query += " AND ExecutionStatus = 'Running'"
	}
	var out []api.ClaimHygieneStatus
	var token []byte
	for {
		resp, err := tc.ListWorkflow(c.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list claim hygiene workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				continue // its newest run is listed on its own
			}
			var st api.ClaimHygieneStatus
			if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				v, err := tc.QueryWorkflow(c.Context(), id, run, api.QueryState)
				if err != nil {
					return nil, fmt.Errorf("query %s: %w", id, err)
				}
				if err := v.Get(&st); err != nil {
					return nil, err
				}
			} else if err := tc.GetWorkflow(c.Context(), id, run).Get(c.Context(), &st); err != nil {
				st = api.ClaimHygieneStatus{State: strings.ToLower(e.GetStatus().String()), Finding: capacity.Finding{Claim: id}}
			}
			out = append(out, st)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
