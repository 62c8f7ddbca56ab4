package sim

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// TestLoadFigures: three tenants of a fifth of a device each, one trying four times its share. A
// driver that enforces holds each to its share at the device's own latency; one that does not
// lets the noisy tenant take what the others lose, and the overload shows in everyone's p99.
func TestLoadFigures(t *testing.T) {
	g := []loadRun{{demand: 0.2, share: 0.2}, {demand: 0.2, share: 0.2}, {demand: 0.8, share: 0.2}}
	enforced := LoadFigures(g, true)
	for i, r := range enforced {
		if r.Throughput != 200 || r.P99Ms != LoadP99Ms {
			t.Errorf("enforced load %d: %+v", i, r)
		}
	}
	loose := LoadFigures(g, false)
	if loose[0].Throughput != 166.7 || loose[2].Throughput != 666.7 || loose[0].P99Ms != 12 || loose[2].P99Ms != 12 {
		t.Errorf("unenforced = %+v", loose)
	}
	// Under the device's capacity, a driver that does not enforce still gives each what it asks.
	light := LoadFigures([]loadRun{{demand: 0.2, share: 0.2}, {demand: 0.4, share: 0.2}}, false)
	if light[0].Throughput != 200 || light[1].Throughput != 400 || light[1].P99Ms != LoadP99Ms {
		t.Errorf("under capacity = %+v", light)
	}
	// A baseline alone on the whole device gets all of it.
	if b := LoadFigures([]loadRun{{demand: 1, share: 1}}, true); b[0].Throughput != LoadThroughput {
		t.Errorf("baseline = %+v", b)
	}
}

// loadPod is a running load Pod with its claim of share of node's gpu-0 memory.
func loadPod(name, node, share, demand, start string) (*corev1.Pod, *resourcev1.ResourceClaim) {
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "proof"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "device", Driver: Driver, Pool: node, Device: "gpu-0",
				ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(share)}}}}}}}
	env := []corev1.EnvVar{{Name: "DEVICEWARDEN_START_AT", Value: start}, {Name: "DEVICEWARDEN_DURATION", Value: "1s"}, {Name: "DEVICEWARDEN_DEMAND_FRACTION", Value: demand}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "proof", Labels: map[string]string{kubeobj.LabelCheck: "proof"}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "load", Image: LoadImage, Env: env}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "device", ResourceClaimName: ptr.To(name)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "load",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}}
	return pod, claim
}

// TestKubeletPlaysTheLoad: the simulated kubelet ends load Pods once their run is over, each group
// that shares a device with the figures of the node's driver; a load Pod whose part cannot be read
// fails with why.
func TestKubeletPlaysTheLoad(t *testing.T) {
	ctx := context.Background()
	start := time.Now().Add(-2 * time.Second).UTC().Format(time.RFC3339Nano)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	var objs []runtime.Object
	for _, node := range []string{"enforced", "loose"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{}}}
		if node == "loose" {
			n.Annotations[AnnotationUnenforced] = "true"
		}
		objs = append(objs, n, NodeSlice(node, 1, true))
		for i, demand := range []string{"0.2", "0.2", "0.8"} {
			p, c := loadPod(node+"-"+strconv.Itoa(i), node, "8Gi", demand, start)
			objs = append(objs, p, c)
		}
	}
	p, c := loadPod("running", "enforced", "8Gi", "0.2", later)
	objs = append(objs, p, c)
	p, c = loadPod("bad", "enforced", "8Gi", "lots", start)
	objs = append(objs, p, c)
	cs := fake.NewClientset(objs...)
	k := &Kubelet{Kube: cs}
	pods, _ := cs.CoreV1().Pods("proof").List(ctx, metav1.ListOptions{})
	if err := k.runLoads(ctx, pods.Items, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"enforced-0": `{"throughput":200,"p99Ms":10,"drops":0,"errors":0}`,
		"enforced-2": `{"throughput":200,"p99Ms":10,"drops":0,"errors":0}`,
		"loose-0":    `{"throughput":166.7,"p99Ms":12,"drops":0,"errors":0}`,
		"loose-2":    `{"throughput":666.7,"p99Ms":12,"drops":0,"errors":0}`,
	}
	for name, msg := range want {
		got, _ := cs.CoreV1().Pods("proof").Get(ctx, name, metav1.GetOptions{})
		term := got.Status.ContainerStatuses[0].State.Terminated
		if got.Status.Phase != corev1.PodSucceeded || term == nil || term.Message != msg || term.StartedAt.IsZero() {
			t.Errorf("%s: %s %+v, want %s", name, got.Status.Phase, term, msg)
		}
	}
	if got, _ := cs.CoreV1().Pods("proof").Get(ctx, "running", metav1.GetOptions{}); got.Status.Phase != corev1.PodRunning {
		t.Errorf("a load whose run is not over ended: %s", got.Status.Phase)
	}
	got, _ := cs.CoreV1().Pods("proof").Get(ctx, "bad", metav1.GetOptions{})
	if term := got.Status.ContainerStatuses[0].State.Terminated; got.Status.Phase != corev1.PodFailed || term == nil || !strings.Contains(term.Message, "DEVICEWARDEN_DEMAND_FRACTION \"lots\"") {
		t.Errorf("bad load: %s %+v", got.Status.Phase, got.Status.ContainerStatuses[0].State)
	}
}
