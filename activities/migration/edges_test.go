package migration

import (
	"context"
	"errors"
	"github.com/devicewarden/devicewarden/api"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Events are cut by whole lines from the oldest, no more than needed: a line that ends exactly at
// the excess goes, the next one stays.
func TestEvidenceTrimCutsOnlyWhatIsNeeded(t *testing.T) {
	for _, c := range []struct{ events, want string }{
		{"123456789\nsecond line\n", "second line\n"},   // the excess (10 bytes) ends a line
		{"12345678901234\nnext\n", "next\n"},            // the excess ends inside the first line
		{"1234\n56789\n01234\nlast\n", "01234\nlast\n"}, // it spans two lines
	} {
		data := map[string]string{"events.txt": c.events}
		pad := maxEvidence + 10 - len("events.txt") - len(c.events) - len("pad")
		data["pad"] = strings.Repeat("x", pad)
		trim(data)
		if data["events.txt"] != c.want || len(data["pad"]) != pad {
			t.Errorf("%q: events %q, pad cut to %d", c.events, data["events.txt"], len(data["pad"]))
		}
	}
}

// A failed renewal is retried; a Lease another holder took ends the hold without retry.
func TestHoldMigrationLeaseRetriesThenStopsWhenTaken(t *testing.T) {
	now := metav1.NewMicroTime(time.Now())
	w := api.Workload{Namespace: "team-a", Name: "train", UID: "uid-train"}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: MigrationLeaseName(w)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To(int32(60)), RenewTime: &now}}
	env, a, kube := activityEnv(t, lease)
	failed := 0
	kube.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed < 2 {
			failed++
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	_, err := env.ExecuteActivity(a.HoldMigrationLease, LeaseInput{Workload: w, Holder: "migrate/mine", Duration: 300 * time.Millisecond})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrLeaseLost || !app.NonRetryable() || failed != 2 {
		t.Fatalf("hold ended with %v after %d failed renewals, want %s after 2", err, failed, ErrLeaseLost)
	}
}

// Holding never creates the Lease: one released when its migration ended stays released even if the
// holding activity has not heard of the end yet (a Lease left behind would block the workload's
// next migration for a minute).
func TestHoldMigrationLeaseNeverRecreatesIt(t *testing.T) {
	env, a, kube := activityEnv(t)
	w := api.Workload{Namespace: "team-a", Name: "train", UID: "uid-train"}
	_, err := env.ExecuteActivity(a.HoldMigrationLease, LeaseInput{Workload: w, Holder: "migrate/mine", Duration: 300 * time.Millisecond})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrLeaseLost || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("hold of a released Lease ended with %v", err)
	}
	if l, err := kube.CoordinationV1().Leases("default").List(context.Background(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("leases %v (%v): the hold created one", l, err)
	}
}
