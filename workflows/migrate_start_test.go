package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// An Unhealthy quarantine starts one migration per workload of the Pods on the device, keyed by
// device, workload and status version; Unknown starts none.
func TestQuarantineStartsMigrations(t *testing.T) {
	for _, c := range []struct {
		name   string
		health device.Health
		end    time.Duration
		want   string
	}{
		{"unhealthy", device.Unhealthy, time.Minute, "migrate/gpu.sim.devicewarden.io/node-1/gpu-0/job-uid/10,migrate/gpu.sim.devicewarden.io/node-1/gpu-0/rs-uid/10"},
		{"unknown", device.Unknown, 10 * time.Minute, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(0)
			p := policy.Default()
			p.Migration = policy.DefaultMigration()
			p.Migration.Enabled = true
			h.pol = &p
			var found []migration.FindWorkloadsInput
			h.env.OnActivity("FindWorkloads", mock.Anything, mock.Anything).Return(
				func(_ context.Context, in migration.FindWorkloadsInput) ([]api.Workload, error) {
					found = append(found, in)
					return []api.Workload{{Kind: "Job", Namespace: "ns", Name: "train", UID: "job-uid", Pods: []string{"p"}},
						{Kind: "Deployment", Namespace: "ns", Name: "serve", UID: "rs-uid", Pods: []string{"q"}}}, nil
				})
			var started []api.MigrateInput
			h.env.RegisterWorkflow(MigrateWorkflow)
			h.env.OnWorkflow("MigrateWorkflow", mock.Anything, mock.Anything).Return(
				func(ctx workflow.Context, in api.MigrateInput) (migrationplan.MigrationState, error) {
					started = append(started, in)
					return migrationplan.MigrationState{}, nil
				})
			st := h.run(t, c.end, ob(time.Second, c.health, "10"))
			if got := strings.Join(st.Migrations, ","); got != c.want {
				t.Fatalf("migrations %q, want %q", got, c.want)
			}
			if c.want == "" {
				if len(found) != 0 {
					t.Fatalf("looked for workloads of an %s device", c.health)
				}
				return
			}
			if len(found) != 1 || len(found[0].Pods) != 1 || found[0].Pods[0] != (migration.PodRef{Namespace: "ns", Name: "p"}) {
				t.Fatalf("FindWorkloads %+v", found)
			}
			if len(started) != 2 || started[0].StatusVersion != "10" || started[0].Node != "node-1" || !started[0].Policy.Enabled ||
				started[0].Report == "" || started[0].QuarantinedAt.IsZero() {
				t.Fatalf("started %+v", started)
			}
		})
	}
}
