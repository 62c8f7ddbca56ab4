package workflows

import (
	"errors"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/decide"
)

// startMigrations finds the workloads of the Pods on a quarantined device and starts one migration
// per workload, abandoned by this workflow (they outlive its continue-as-new). A migration of the
// same report already started (a repeated trigger) is joined, not started twice.
func startMigrations(ctx workflow.Context, st *decide.DeviceState, pods []decide.PodRef) {
	in := migration.FindWorkloadsInput{}
	for _, p := range pods {
		in.Pods = append(in.Pods, migration.PodRef{Namespace: p.Namespace, Name: p.Name})
	}
	var ws []api.Workload
	if err := workflow.ExecuteActivity(kubeCallOptions(ctx), mig.FindWorkloads, in).Get(ctx, &ws); err != nil {
		workflow.GetLogger(ctx).Warn("workloads not found; nothing moved", "error", err)
		return
	}
	var ids []string
	report := ""
	var at = workflow.Now(ctx)
	if q := st.Quarantine; q != nil {
		report, at = q.Reason, q.CreatedAt
	}
	for _, w := range ws {
		id := api.MigrationID(st.Device, w.UID, st.StatusVersion)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:            id,
			ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_ABANDON,
			WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		})
		mi := api.MigrateInput{Device: st.Device, Node: st.Node, Workload: w, StatusVersion: st.StatusVersion, Report: report,
			QuarantinedAt: at, Policy: st.Policy.Migration, Channel: st.Policy.SlackChannel}
		f := workflow.ExecuteChildWorkflow(cctx, MigrateWorkflow, mi)
		err := f.GetChildWorkflowExecution().Get(ctx, nil)
		var started *temporal.ChildWorkflowExecutionAlreadyStartedError
		switch {
		case err == nil:
		case errors.As(err, &started):
			workflow.GetLogger(ctx).Info("migration already started", "migration", id)
		default:
			workflow.GetLogger(ctx).Warn("migration not started", "migration", id, "error", err)
			continue
		}
		ids = append(ids, id)
	}
	decide.Step(st, decide.Event{Kind: decide.EventMigrating, At: workflow.Now(ctx), Migrations: ids})
}
