//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// checkOf is one check a shipped policy would run, with what it must show.
type checkOf struct {
	what  string
	kind  decide.ActionKind
	check policy.Check
	node  bool // a node step's check across the node
}

// checksOf lists every check a policy runs: its probe, canary, probe by path, reset steps and
// node checks.
func checksOf(p policy.Policy) []checkOf {
	out := []checkOf{{"probe", decide.ActProbe, p.Probe, false}, {"canary", decide.ActCanary, p.Canary, false}}
	for kind, c := range p.ProbeAfter {
		out = append(out, checkOf{"probeAfter." + string(kind), decide.ActProbe, c, false})
	}
	for i, s := range p.Repair.Steps {
		if s.Kind == policy.RepairReset {
			out = append(out, checkOf{fmt.Sprintf("repair.steps[%d]", i), decide.ActRepair, s.Check, false})
		}
		if s.NodeCheck != nil {
			out = append(out, checkOf{fmt.Sprintf("repair.steps[%d].nodeCheck", i), remediation.ActNodeCheck, *s.NodeCheck, true})
		}
	}
	return out
}

// Every check of every shipped example policy makes objects the real apiserver accepts (a
// server-side dry run: the Pod spec, the device claim, the tolerations all validated), whose claim
// asks for the device (one device pinned by a selector, or all of the node's) and tolerates the
// taint its stage meets.
func TestShippedExamplesMakeValidChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../../deploy/examples/*/*.yaml")
	files = append(files, more...)
	n, paths, nodeChecks := 0, 0, 0
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, file := range files {
		if strings.Contains(file, "rollout-plan") || strings.Contains(file, "nvsentinel") {
			continue // not policy files
		}
		set, err := policy.LoadFile(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, p := range set.All() {
			for _, c := range checksOf(p) {
				where := fmt.Sprintf("%s: policy %q %s", filepath.Base(file), p.Name, c.what)
				if err := kubeobj.EnsureNamespace(ctx, kube, c.check.Namespace); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				id := device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"}
				var claim *resourcev1.ResourceClaim
				var pod *corev1.Pod
				if c.node {
					claim, pod = remediation.NodeCheckObjects(remediation.NodeInput{Device: id, Node: "node-1", WorkflowID: id.WorkflowID()},
						c.check, "gpu.example.com", c.check.Namespace, "nodecheck-shape")
					nodeChecks++
					if r := claim.Spec.Devices.Requests[0].Exactly; r.AllocationMode != resourcev1.DeviceAllocationModeAll || len(r.Tolerations) != 1 {
						t.Errorf("%s: claim %+v", where, r)
					}
				} else {
					in := remediation.CheckInput{Device: id, Kind: c.kind, Check: c.check, DeviceClass: "gpu.example.com", WorkflowID: id.WorkflowID()}
					env := []corev1.EnvVar{{Name: "DEVICEWARDEN_ATTR_UUID", Value: "GPU-0"}}
					var job *batchv1.Job
					claim, pod, job = remediation.CheckObjects(in, c.check.Namespace, "check-shape", `device.attributes["gpu.example.com"].uuid == "GPU-0"`, "node-1", env)
					if job != nil {
						if _, err := kube.BatchV1().Jobs(c.check.Namespace).Create(ctx, job, dry); err != nil {
							t.Errorf("%s: the apiserver refuses the Job: %v", where, err)
						}
					}
					want := decide.TaintQuarantine
					if c.kind == decide.ActCanary {
						want = decide.TaintProbation
					}
					r := claim.Spec.Devices.Requests[0].Exactly
					if r.Count != 1 || len(r.Selectors) != 1 || !slices.ContainsFunc(r.Tolerations, func(t resourcev1.DeviceToleration) bool { return t.Key == want }) {
						t.Errorf("%s: claim %+v", where, r)
					}
				}
				if c.check.Image == "" || len(c.check.Command) == 0 {
					t.Errorf("%s: no image or command", where)
				}
				if _, err := kube.ResourceV1().ResourceClaims(c.check.Namespace).Create(ctx, claim, dry); err != nil {
					t.Errorf("%s: the apiserver refuses the claim: %v", where, err)
				}
				if pod != nil {
					if _, err := kube.CoreV1().Pods(c.check.Namespace).Create(ctx, pod, dry); err != nil {
						t.Errorf("%s: the apiserver refuses the Pod: %v", where, err)
					}
				}
				n++
				if strings.HasPrefix(c.what, "probeAfter.") {
					paths++
				}
			}
		}
	}
	// The examples name probes by path and node checks: the test saw them.
	if paths < 4 || nodeChecks < 2 {
		t.Fatalf("%d checks, %d probes by path, %d node checks in the shipped examples", n, paths, nodeChecks)
	}
	t.Logf("%d checks in %d files, %d probes by path, %d node checks: all accepted", n, len(files), paths, nodeChecks)
}
