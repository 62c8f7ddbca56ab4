package rollouts

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// An enable that failed after switching some nodes is undone by its phase's selector: the nodes
// its enable recorded a previous owner on go back to that owner; a node of the phase it never
// switched, and one another rollout switched, are left alone.
func TestUndoOfAFailedEnableFindsTheNodesItSwitched(t *testing.T) {
	switched := poolNode("n1", map[string]string{owner: "dra"}, 0)
	switched.Annotations = map[string]string{kubeobj.AnnotationRolloutPrevious: "r/plugin", kubeobj.AnnotationRolloutDevices: "8"}
	untouched := poolNode("n2", map[string]string{owner: "plugin"}, 8)
	other := poolNode("n3", map[string]string{owner: "dra"}, 0)
	other.Annotations = map[string]string{kubeobj.AnnotationRolloutPrevious: "another/plugin"}
	env, a, kube := activityEnv(t, switched, untouched, other)
	in := UndoInput{Rollout: "r", OwnerLabel: owner, Change: rolloutplan.PhaseChange{Phase: "a", Partial: true}, Drivers: []string{drv}, Selector: "pool=a"}
	v, err := env.ExecuteActivity(a.UndoRolloutPhase, in)
	if err != nil {
		t.Fatal(err)
	}
	var res UndoResult
	_ = v.Get(&res)
	if len(res.Returned) != 1 || res.Returned[0] != "n1" || len(res.Held) != 0 {
		t.Fatalf("undo = %+v, want n1 returned", res)
	}
	ctx := context.Background()
	for name, want := range map[string]string{"n1": "plugin", "n2": "plugin", "n3": "dra"} {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[owner] != want {
			t.Errorf("%s owned by %q, want %q", name, n.Labels[owner], want)
		}
	}
	// Without the selector there is nothing to find the nodes by: refused, not guessed.
	in.Selector = ""
	if _, err := env.ExecuteActivity(a.UndoRolloutPhase, in); err == nil || !strings.Contains(err.Error(), "names no node selector") {
		t.Fatalf("undo without a selector: %v", err)
	}
}
