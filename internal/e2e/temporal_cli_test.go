//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// temporalCLI runs the stock temporal CLI (built from the Go module proxy into the tool cache by
// `make control-plane`) against the test server.
func temporalCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	bin := (&localcluster.Builder{CacheDir: localcluster.DefaultCacheDir()}).Binary("temporal")
	args = append(args, "--address", shared.frontend, "--namespace", "default")
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// TestStockTemporalCLI: what README tells operators to type works. A malformed extend signal is
// accepted by the server and dropped by the workflow, which still quarantines on the next report;
// an update the device's state refuses comes back with the reason; a good one is answered.
func TestStockTemporalCLI(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "tcli", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-0"}
	wf := id.WorkflowID()
	runningPod(t, ctx, kube, sim.Workload{Namespace: "tcli", Name: "trainer", Node: nodes[0], Index: ptr.To(0), Template: true})
	if _, err := sim.SetHealth(ctx, kube, id, corev1.ResourceHealthStatusUnknown, "driver restarting"); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, shared, id, 30*time.Second, func(st decide.DeviceState) bool { return st.State == decide.Suspect })

	if out, err := temporalCLI(t, ctx, "workflow", "signal", "--workflow-id", wf, "--name", "extend", "--input", `{"actor":"bob","duration":[1]}`); err != nil {
		t.Fatalf("signal: %v\n%s", err, out)
	}
	out, err := temporalCLI(t, ctx, "workflow", "update", "execute", "--workflow-id", wf, "--name", "extend", "--input", `{"actor":"bob","duration":"48h"}`)
	if err == nil || !strings.Contains(out, "not quarantined or restricted") {
		t.Fatalf("extend of a suspect device was not refused with the reason: %v\n%s", err, out)
	}
	if _, err := sim.SetHealth(ctx, kube, id, corev1.ResourceHealthStatusUnhealthy, "XID 79"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "rule after the malformed signal", func() error {
		_, err := kube.ResourceV1().DeviceTaintRules().Get(ctx, id.TaintRuleName(), metav1.GetOptions{})
		return err
	})
	out, err = temporalCLI(t, ctx, "workflow", "update", "execute", "--workflow-id", wf, "--name", "extend", "--input", `{"actor":"bob","duration":"48h"}`)
	if err != nil || !strings.Contains(out, "extended by 48h0m0s") {
		t.Fatalf("extend: %v\n%s", err, out)
	}
	out, err = temporalCLI(t, ctx, "workflow", "query", "--workflow-id", wf, "--type", "state")
	if err != nil || !strings.Contains(out, `"state": "Quarantined"`) && !strings.Contains(out, `"state":"Quarantined"`) || !strings.Contains(out, "does not decode") {
		t.Fatalf("query: %v\n%s", err, out)
	}
	out, err = temporalCLI(t, ctx, "workflow", "query", "--workflow-id", wf, "--type", "view")
	if err != nil || !strings.Contains(out, "Quarantined since ") || !strings.Contains(out, "extended by 48h0m0s") {
		t.Fatalf("query view: %v\n%s", err, out)
	}
	// Which decision rules the run follows: every one, for a run this build started.
	out, err = temporalCLI(t, ctx, "workflow", "query", "--workflow-id", wf, "--type", "rules")
	var rules decide.Rules
	if i := strings.Index(out, "{"); err != nil || i < 0 || json.Unmarshal([]byte(strings.TrimSpace(out[i:])), &rules) != nil {
		t.Fatalf("query rules: %v\n%s", err, out)
	}
	v := reflect.ValueOf(rules)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Bool && !f.Bool() {
			t.Errorf("a run this build started does not follow rule %s:\n%s", v.Type().Field(i).Name, out)
		}
	}
}
