package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

func newMigrationCmd(g *globals) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{Use: "migration", Short: "List migrations, show one, or decide on a workload that could not be moved safely"}
	cf.add(cmd)
	var all bool
	list := &cobra.Command{
		Use: "list", Short: "List migrations (running ones unless --all)", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			tc, err := cf.dial(c, g)
			if err != nil {
				return err
			}
			defer tc.Close()
			query := "WorkflowType = 'MigrateWorkflow'"
			if !all {
				query += " AND ExecutionStatus = 'Running'"
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MIGRATION\tSTATUS\tSTARTED")
			err = eachWorkflow(c.Context(), tc, cf.o.Namespace, query, func(e *workflowpb.WorkflowExecutionInfo) {
				fmt.Fprintf(w, "%s\t%s\t%s\n", e.GetExecution().GetWorkflowId(), e.GetStatus(), e.GetStartTime().AsTime().Format(time.RFC3339))
			})
			if err != nil {
				return fmt.Errorf("list migrations: %w", err)
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&all, "all", false, "include finished migrations")
	show := &cobra.Command{
		Use: "show MIGRATION-ID", Short: "Print a migration's state (phase, what it waits for, outcome, steps) as JSON", Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var st migrationplan.MigrationState
			return cf.queryJSON(c, g, args[0], &st)
		},
	}
	limits := &cobra.Command{
		Use: "limits", Short: "Print the migration limiter's holders and queue as JSON", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var st migrationplan.SlotState
			return cf.queryJSON(c, g, api.MigrationLimiterID, &st)
		},
	}
	cmd.AddCommand(list, show, limits)
	for _, k := range []struct{ name, short string }{
		{api.UpdateMigrateAnyway, "Move a workload that waits for a decision, without its checkpoint"},
		{api.UpdateAbandon, "Leave a workload that waits for a decision where it is"},
	} {
		k := k
		var actor, reason string
		sub := &cobra.Command{
			Use: k.name + " MIGRATION-ID", Short: k.short, Args: cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				if !strings.HasPrefix(args[0], "migrate/") {
					return fmt.Errorf("%q is not a migration ID (migrate/<driver>/<pool>/<device>/<workload-uid>/<status-version>)", args[0])
				}
				if actor == "" {
					return fmt.Errorf("--actor is required: every operator action is audited")
				}
				tc, err := cf.dial(c, g)
				if err != nil {
					return err
				}
				defer tc.Close()
				h, err := tc.UpdateWorkflow(c.Context(), client.UpdateWorkflowOptions{WorkflowID: args[0], UpdateName: k.name,
					Args: []any{migrationplan.MigrationDecision{Actor: actor, Reason: reason}}, WaitForStage: client.WorkflowUpdateStageCompleted})
				if err != nil {
					return fmt.Errorf("%s %s: %w", k.name, args[0], err)
				}
				var st migrationplan.MigrationState
				if err := h.Get(c.Context(), &st); err != nil {
					return fmt.Errorf("%s %s: %w", k.name, args[0], err)
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: %s %s\n", args[0], st.Phase, st.Outcome)
				return nil
			},
		}
		sub.Flags().StringVar(&actor, "actor", "", "who decides (recorded in the migration's steps)")
		sub.Flags().StringVar(&reason, "reason", "", "why")
		cmd.AddCommand(sub)
	}
	return cmd
}
