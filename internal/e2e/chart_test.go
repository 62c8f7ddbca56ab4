//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/slackapp"
)

// helmBinary is helm built from the Go module proxy (make test-e2e builds it; DEVICEWARDEN_HELM
// names it).
func helmBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv("DEVICEWARDEN_HELM")
	if path == "" {
		path = (&localcluster.Builder{CacheDir: localcluster.DefaultCacheDir()}).Binary("helm")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("helm not built (%v): make test-e2e builds it from the Go module proxy", err)
	}
	return path
}

// renderChart runs helm template on the chart with these --set values (or flags, "--...").
func renderChart(t *testing.T, release, namespace string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := helmTemplate(t, release, namespace, sets...)
	if err != nil {
		t.Fatalf("helm template %s %v: %v\n%s", release, sets, err, stderr)
	}
	return decodeAll(t, out)
}

// helmTemplate runs helm template and returns what it printed on stdout and on stderr.
func helmTemplate(t *testing.T, release, namespace string, sets ...string) ([]byte, string, error) {
	t.Helper()
	args := []string{"template", release, filepath.Join("..", "..", "deploy", "helm", "devicewarden"), "--namespace", namespace, "--kube-version", "1.37.2"}
	for _, s := range sets {
		if strings.HasPrefix(s, "--") {
			args = append(args, s)
		} else {
			args = append(args, "--set", s)
		}
	}
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return out, stderr.String(), err
}

// applyObjects applies objects with server-side apply (dryRun: the apiserver validates and
// admits them without storing them).
func applyObjects(t *testing.T, ctx context.Context, s *stack, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	if err := apply(ctx, s, objs, dryRun); err != nil {
		t.Fatal(err)
	}
}

func apply(ctx context.Context, s *stack, objs []*unstructured.Unstructured, dryRun bool) error {
	cfg, err := app.KubeConfig(s.kubeconfig)
	if err != nil {
		return err
	}
	cfg.ContentType = "" // unstructured objects travel as JSON
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.kube.Discovery()))
	opts := metav1.ApplyOptions{FieldManager: "e2e-chart", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, opts); err != nil {
			return fmt.Errorf("apply %s %s/%s (dry run %v): %w", gvk.Kind, o.GetNamespace(), o.GetName(), dryRun, err)
		}
	}
	return nil
}

// decodeAll reads every object of a multi-document YAML stream.
func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

// operatorCRDs are the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, from the Go
// module proxy's copy of its module.
func operatorCRDs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	const mod = "github.com/prometheus-operator/prometheus-operator@v0.88.0"
	out, err := exec.Command("go", "mod", "download", "-json", mod).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", mod, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", mod, err, info.Error)
	}
	var crds []*unstructured.Unstructured
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		data, err := os.ReadFile(filepath.Join(info.Dir, "example", "prometheus-operator-crd", f))
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, decodeAll(t, data)...)
	}
	return crds
}

// ofKind keeps the objects of the given kinds, in order.
func ofKind(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.GetKind()]++
	}
	return out
}

// TestChartRendersAndTheAPIServerAcceptsIt: the chart rendered by helm is accepted by the real
// apiserver (server-side dry run). Without the Prometheus Operator's API it renders no
// ServiceMonitor or PrometheusRule; with its CRDs applied, both, and the apiserver accepts them.
// A missing temporal.address is refused.
func TestChartRendersAndTheAPIServerAcceptsIt(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "dwchart"
	if _, err := shared.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	objs := renderChart(t, "dw", ns, "temporal.address=temporal-frontend.temporal:7233", "policy=version: 1")
	k := kinds(objs)
	for _, want := range []string{"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "PodDisruptionBudget", "ConfigMap", "Namespace"} {
		if k[want] == 0 {
			t.Errorf("rendered no %s: %v", want, k)
		}
	}
	if k["ServiceMonitor"] != 0 || k["PrometheusRule"] != 0 {
		t.Errorf("Prometheus Operator objects without its API: %v", k)
	}
	for _, o := range objs {
		labels := o.GetLabels()
		if labels["app.kubernetes.io/name"] != "devicewarden" || labels["app.kubernetes.io/instance"] != "dw" || !strings.HasPrefix(labels["helm.sh/chart"], "devicewarden-") {
			t.Errorf("%s %s lacks the standard labels: %v", o.GetKind(), o.GetName(), labels)
		}
	}
	// helm installs Namespaces before the objects in them; a dry run cannot place a Role in a
	// namespace it did not store, so the check namespaces are applied for real first.
	applyObjects(t, ctx, shared, ofKind(objs, "Namespace"), false)
	applyObjects(t, ctx, shared, objs, true)

	// With the Prometheus Operator's CRDs (applied from the Go module proxy's copy) the chart
	// renders a ServiceMonitor and a PrometheusRule, and the apiserver validates them too.
	applyObjects(t, ctx, shared, operatorCRDs(t), false)
	withOperator := renderChart(t, "dw", ns, "temporal.address=t:7233",
		"--api-versions=monitoring.coreos.com/v1/ServiceMonitor", "--api-versions=monitoring.coreos.com/v1/PrometheusRule")
	if k := kinds(withOperator); k["ServiceMonitor"] != 1 || k["PrometheusRule"] != 1 {
		t.Fatalf("with the operator's API: %v", k)
	}
	eventually(t, time.Minute, "chart with the operator's objects accepted", func() error {
		return apply(ctx, shared, withOperator, true)
	})
	if _, stderr, err := helmTemplate(t, "dw", ns); err == nil || !strings.Contains(stderr, "temporal.address is required") {
		t.Fatalf("without temporal.address: %v\n%s", err, stderr)
	}
	// A policy that runs checks where the account has no rights is refused at install time.
	elsewhere := "policy=policies:\n  - name: nics\n    canary: {namespace: team-a}\n"
	if _, stderr, err := helmTemplate(t, "dw", ns, "temporal.address=t:7233", elsewhere); err == nil || !strings.Contains(stderr, `namespace "team-a", which is not in checks.namespaces`) {
		t.Fatalf("policy with a canary in team-a: %v\n%s", err, stderr)
	}
	if _, stderr, err := helmTemplate(t, "dw", ns, "temporal.address=t:7233", elsewhere, "checks.namespaces={devicewarden-probes,devicewarden-canary,team-a}"); err != nil {
		t.Fatalf("team-a listed in checks.namespaces: %v\n%s", err, stderr)
	}
}

// TestChartRightsRunTheQuarantine: the chart's RBAC objects and check namespaces applied for
// real; a controller whose every Kubernetes call is made as the chart's ServiceAccount
// (impersonation) quarantines an Unhealthy device, then reviews it (probe Pod, canary Job, their
// claims in the check namespaces) and releases it. Rights the chart does not give are refused:
// reading Secrets, updating a node's Lease, writing a Lease outside its namespace, editing Pod
// status, deleting or creating Pods outside the check namespaces, creating namespaces, patching a
// Pod outside migration.namespaces, and (rollouts off, the default) patching nodes. In a namespace
// that opted in to migration it may patch a Pod (the checkpoint request).
func TestChartRightsRunTheQuarantine(t *testing.T) {
	onOwnStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, stopInfra, err := startInfra(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopInfra()
	const ns, release = "dwrbac", "dw"
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const tenant = "dwrbac-tenant" // opts in to migration
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// rollout.enabled is left at its default (off).
	rbac := ofKind(renderChart(t, release, ns, "temporal.address=t:7233", "migration.namespaces={"+tenant+"}",
		"repair.nodeRemediators[0].apiGroup="+sim.RebootGroup, "repair.nodeRemediators[0].resource="+sim.RebootResource),
		"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
	applyObjects(t, ctx, s, rbac, false)
	cfg, err := app.KubeConfig(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":" + release + "-devicewarden"
	cfg.Impersonate.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A node step may create, read and delete the remediator's objects the chart lists, and no other.
	for _, tt := range []struct {
		group, resource, verb string
		allowed               bool
		sub                   string
	}{
		{sim.RebootGroup, sim.RebootResource, "create", true, ""}, {sim.RebootGroup, sim.RebootResource, "get", true, ""},
		{sim.RebootGroup, sim.RebootResource, "delete", true, ""}, {sim.RebootGroup, sim.RebootResource, "update", false, ""},
		{"self-node-remediation.medik8s.io", "selfnoderemediations", "create", false, ""},
		// Detectors' reports: read, their status written, deleted past the retention; never
		// edited. Created: DeviceWarden's own, for the devices a failed reset of their domain reached.
		{healthreport.Group, healthreport.Resource, "watch", true, ""}, {healthreport.Group, healthreport.Resource, "create", true, ""},
		{healthreport.Group, healthreport.Resource, "update", false, ""}, {healthreport.Group, healthreport.Resource, "update", true, "status"},
		{healthreport.Group, healthreport.Resource, "delete", true, ""},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: cfg.Impersonate.UserName, Groups: cfg.Impersonate.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: tt.group, Resource: tt.resource, Subresource: tt.sub, Verb: tt.verb, Name: "devicewarden-reboot-x"}}}
		got, err := s.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil || got.Status.Allowed != tt.allowed {
			t.Errorf("%s %s.%s/%s: allowed %v, want %v (%v)", tt.verb, tt.resource, tt.group, tt.sub, got.Status.Allowed, tt.allowed, err)
		}
	}

	pols, err := policy.Parse([]byte("default: {quarantineLease: 10s, stabilityWindow: 1s, probe: {timeout: 30s}, canary: {timeout: 30s}}"))
	if err != nil {
		t.Fatal(err)
	}
	pols = pols.WithIdentity(sim.Driver, sim.Identity...).WithCDI(sim.Driver, sim.DeclaredCDIStyles...)
	_, stop := s.controllerAs(sa, app.ControllerOptions{Workers: 4, OwnNamespace: ns, Policies: pols, Breaker: breaker.Config{Window: time.Minute, MaxCount: 100}})
	defer stop()
	ids := devicePods(t, ctx, s.kube, "rbac", 1)
	setHealth(t, ctx, s.kube, ids, corev1.ResourceHealthStatusUnhealthy)
	eventually(t, time.Minute, "device quarantined as the chart's ServiceAccount", func() error {
		_, err := s.kube.ResourceV1().DeviceTaintRules().Get(ctx, ids[0].TaintRuleName(), metav1.GetOptions{})
		return err
	})
	// What kubectl describe pod shows: the Events on the Pod that reported the device.
	eventually(t, 30*time.Second, "the quarantine told on the Pod", func() error {
		pods, err := s.kube.CoreV1().Pods("rbac").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 {
			return fmt.Errorf("rbac Pods: %v, %d", err, len(pods.Items))
		}
		p := pods.Items[0]
		evs, err := s.kube.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + p.Name + ",reason=DeviceQuarantined"})
		if err != nil {
			return err
		}
		if len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, ids[0].TaintRuleName()) {
			return fmt.Errorf("events on %s: %+v", p.Name, evs.Items)
		}
		return nil
	})

	forbidden := map[string]error{}
	_, forbidden["list secrets"] = sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	nodeLease, err := s.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || len(nodeLease.Items) == 0 {
		t.Fatalf("node leases: %v", err)
	}
	l := nodeLease.Items[0]
	l.Spec.HolderIdentity = ptr.To("devicewarden")
	_, forbidden["update a node's Lease"] = sa.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, &l, metav1.UpdateOptions{})
	_, forbidden["create a Lease in default"] = sa.CoordinationV1().Leases("default").Create(ctx,
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "devicewarden-watcher"}}, metav1.CreateOptions{})
	pods, err := s.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods: %v", err)
	}
	_, forbidden["update Pod status"] = sa.CoreV1().Pods(pods.Items[0].Namespace).UpdateStatus(ctx, &pods.Items[0], metav1.UpdateOptions{})
	forbidden["delete a Pod outside the check namespaces"] = sa.CoreV1().Pods(pods.Items[0].Namespace).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{})
	_, forbidden["create a Pod outside the check namespaces"] = sa.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{})
	_, forbidden["create a namespace"] = sa.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dw-new"}}, metav1.CreateOptions{})
	_, forbidden["patch a node (rollouts off by default)"] = sa.CoreV1().Nodes().Patch(ctx, pods.Items[0].Spec.NodeName, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	annotate := []byte(`{"metadata":{"annotations":{"devicewarden.io/test":"x"}}}`)
	_, forbidden["patch a Pod outside migration.namespaces"] = sa.CoreV1().Pods(pods.Items[0].Namespace).Patch(ctx, pods.Items[0].Name, types.MergePatchType, annotate, metav1.PatchOptions{})
	_, forbidden["create an admission policy (rollouts off by default)"] = sa.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx,
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "dw-test"}}, metav1.CreateOptions{})
	tenantPod, err := s.kube.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Pods(tenant).Patch(ctx, tenantPod.Name, types.MergePatchType, annotate, metav1.PatchOptions{}); err != nil {
		t.Errorf("patching a Pod in %s, which opted in to migration: %v", tenant, err)
	}
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as the chart's ServiceAccount: want Forbidden, got %v", what, err)
		}
	}
	if _, err := sa.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("reading node Leases: %v", err)
	}
	// Served Slack requests are Leases in its own namespace, listed to delete the old ones.
	replays := &slackapp.LeaseReplays{Kube: sa, Namespace: ns}
	if first, err := replays.First(ctx, strings.Repeat("ab", 32), time.Now()); err != nil || !first {
		t.Errorf("remembering a served Slack request: first %v, %v", first, err)
	}
	if _, err := sa.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: slackapp.LabelSlackRequest + "=true"}); err != nil {
		t.Errorf("listing served Slack requests: %v", err)
	}
	// The recovery review, as the same account: the job leaves the device, the probe (a Pod) and
	// the canary (a Job) run with their claims in the chart's check namespaces, and the device
	// is released.
	if err := s.kube.CoreV1().Pods("rbac").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, s, ids[0], 2*time.Minute, func(st decide.DeviceState) bool { return st.State == decide.Released })
	if st.LastProbe == nil || !st.LastProbe.Passed || !strings.HasPrefix(st.LastProbe.Pod, policy.DefaultProbeNamespace+"/") {
		t.Fatalf("released without a passed probe in %s: %+v", policy.DefaultProbeNamespace, st.LastProbe)
	}
}

// envOf reads a Deployment's container env: name -> value, or "secret:<name>/<key>".
func envOf(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	deps := ofKind(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments", len(deps))
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deps[0].Object, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			out[e.Name] = "secret:" + ref.SecretKeyRef.Name + "/" + ref.SecretKeyRef.Key
		} else {
			out[e.Name] = e.Value
		}
	}
	return out
}

// TestChartServesSlackApprovals: with slack.approvals the chart serves Slack's buttons. As an
// endpoint: a Service (and an optional Ingress exposing /slack/interactivity only) to every
// replica's approvals port, the signing secret from the Secret. Over Socket Mode: no Service, the
// app-level token from the Secret. The apiserver accepts both; approvals with nobody allowed to
// approve, or without the Secret, are refused at install.
func TestChartServesSlackApprovals(t *testing.T) {
	inTurn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "dwslack"
	if _, err := shared.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	base := []string{"temporal.address=t:7233", "slack.secret=dw-slack", "slack.approvers={U1,U2}", "checks.createNamespaces=false"}
	endpoint := renderChart(t, "dw", ns, append(base, "slack.approvals=endpoint", "slack.ingress.enabled=true", "slack.ingress.host=dw.example.com")...)
	env := envOf(t, endpoint)
	if env["DEVICEWARDEN_SLACK_SIGNING_SECRET"] != "secret:dw-slack/signing-secret" || env["DEVICEWARDEN_SLACK_APPROVERS"] != "U1,U2" ||
		env["DEVICEWARDEN_APPROVALS_LISTEN"] != ":8090" || env["DEVICEWARDEN_SLACK_APP_TOKEN"] != "" {
		t.Fatalf("endpoint env: %v", env)
	}
	var svc, ing *unstructured.Unstructured
	for _, o := range endpoint {
		if o.GetName() == "dw-devicewarden-approvals" {
			switch o.GetKind() {
			case "Service":
				svc = o
			case "Ingress":
				ing = o
			}
		}
	}
	if svc == nil || ing == nil {
		t.Fatalf("approvals Service %v, Ingress %v", svc != nil, ing != nil)
	}
	paths, _, _ := unstructured.NestedSlice(ing.Object, "spec", "rules")
	if len(paths) != 1 || !strings.Contains(fmt.Sprint(paths[0]), "path:/slack/interactivity") || !strings.Contains(fmt.Sprint(paths[0]), "host:dw.example.com") {
		t.Fatalf("ingress rules %v", paths)
	}
	applyObjects(t, ctx, shared, endpoint, true)

	socket := renderChart(t, "dw", ns, append(base, "slack.approvals=socketMode")...)
	env = envOf(t, socket)
	if env["DEVICEWARDEN_SLACK_APP_TOKEN"] != "secret:dw-slack/app-token" || env["DEVICEWARDEN_SLACK_SIGNING_SECRET"] != "" {
		t.Fatalf("socket mode env: %v", env)
	}
	for _, o := range socket {
		if o.GetName() == "dw-devicewarden-approvals" {
			t.Fatalf("socket mode rendered %s %s: it needs no endpoint", o.GetKind(), o.GetName())
		}
	}
	applyObjects(t, ctx, shared, socket, true)

	for _, bad := range []struct {
		sets []string
		want string
	}{
		{[]string{"temporal.address=t:7233", "slack.secret=s", "slack.approvals=endpoint"}, "nobody may approve"},
		{[]string{"temporal.address=t:7233", "slack.approvers={U1}", "slack.approvals=socketMode"}, "needs slack.secret"},
		{[]string{"temporal.address=t:7233", "slack.approvals=buttons"}, "value must be one of"},
	} {
		if _, stderr, err := helmTemplate(t, "dw", ns, bad.sets...); err == nil || !strings.Contains(stderr, bad.want) {
			t.Errorf("%v: %v, want %q\n%s", bad.sets, err, bad.want, stderr)
		}
	}
}
