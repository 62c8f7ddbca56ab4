package watcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// BenchmarkResolve measures turning one pod's status into device reports.
func BenchmarkResolve(b *testing.B) {
	pod := podWith(healthEntry("claim:gpu", "k8s.gpu.sim.devicewarden.io/gpu=node-1-gpu-3", "Unhealthy", nil))
	claim := compactClaim(claimWith("pod-gpu-abc", result("gpus", "gpu-3")), nil)
	get := func(string, string) (*Claim, bool) { return claim, true }
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := Resolve(pod, get, nil); len(r) != 1 {
			b.Fatal("not resolved")
		}
	}
}

// BenchmarkStoreUpdate measures one pod update through aggregation and the signal decision: each
// update turns its device Unknown <-> Unhealthy, so every one is a change to signal.
func BenchmarkStoreUpdate(b *testing.B) {
	s := newStore()
	reports := make([][2][]Report, 1000)
	for i := range reports {
		for j, h := range []device.Health{device.Unknown, device.Unhealthy} {
			reports[i][j] = []Report{rep(fmt.Sprintf("gpu-%d", i), h, fmt.Sprintf("p%d", i))}
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % len(reports)
		ids, _ := s.setPod(fmt.Sprintf("ns/p%d", k), "7", reports[k][(i/len(reports))%2], nil, nil, false)
		if _, d := s.next(ids[0], benchNow, 0, nil); d != doSignal {
			b.Fatalf("decision %v", d)
		}
		i++
	}
}

// BenchmarkPodUpdate is the fleet bench's storm in one process, without the apiserver: a Pod of
// 8 allocated devices is updated, alternately one device turning Unknown <-> Healthy and only its
// restart count changing, and the queue is drained through the signal decision. One op is one
// update.
func BenchmarkPodUpdate(b *testing.B) { benchPodUpdate(b, false) }

// BenchmarkPodUpdateOnPartitions is BenchmarkPodUpdate on partitionable GPUs: each node's 80
// devices are forms of 8 GPUs (10 forms each, one counter set per GPU), every Pod holding a form
// of each, so a report is filed under its GPU's unit and a unit's other holders are looked for.
func BenchmarkPodUpdateOnPartitions(b *testing.B) { benchPodUpdate(b, true) }

func benchPodUpdate(b *testing.B, onPartitions bool) {
	const pods = 1000
	sig := &counter{}
	// The Kube client answers only the adoption of a unit's other holders (Pods it does not have).
	w := New(Config{Kube: fake.NewClientset(), Signaler: sig, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if onPartitions {
		for n := range pods / 10 {
			pk := poolKey{drv, fmt.Sprintf("node-%d", n)}
			var devs []resourcev1.Device
			for p := range 10 {
				for d := range 8 {
					devs = append(devs, partitioned(fmt.Sprintf("gpu-%d-%d", p, d), fmt.Sprintf("set-%d", d), ""))
				}
			}
			w.slices.set(pk.pool, sliceOf(pk, device.Grouping{}, devs...))
		}
	}
	updates := make([][2]*corev1.Pod, pods) // [health change, unrelated change]
	for i := range updates {
		name := fmt.Sprintf("pod-%d", i)
		var results []resourcev1.DeviceRequestAllocationResult
		var entries []corev1.ResourceHealth
		for d := range 8 {
			r := resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: drv, Pool: fmt.Sprintf("node-%d", i/10), Device: fmt.Sprintf("gpu-%d-%d", i%10, d)}
			results = append(results, r)
			entries = append(entries, corev1.ResourceHealth{ResourceID: corev1.ResourceID(r.Driver + "/" + r.Pool + "/" + r.Device), Health: corev1.ResourceHealthStatusHealthy})
		}
		c := claimWith(name+"-gpu-abc", results...)
		c.Status.ReservedFor[0].UID = types.UID("uid-" + name)
		w.claims.put(c)
		p := podWith(corev1.ResourceStatus{Name: "claim:gpu", Resources: entries})
		p.Name, p.UID = name, types.UID("uid-"+name)
		p.Status.ResourceClaimStatuses[0].ResourceClaimName = ptrTo(name + "-gpu-abc")
		turned := p.DeepCopy()
		turned.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources[i%8].Health = corev1.ResourceHealthStatusUnknown
		updates[i] = [2]*corev1.Pod{turned, p}
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		u := updates[(i/2)%pods][i%2]
		podReader{w}.onPod(u, "update")
		for w.queue.Len() > 0 {
			w.processNext(ctx)
		}
		i++
	}
	b.ReportMetric(float64(sig.n)/float64(i), "signals/op")
}

// counter is a Signaler that only counts.
type counter struct{ n int }

func (c *counter) Signal(context.Context, api.Observation) error { c.n++; return nil }

func (c *counter) RunningDevices(context.Context) ([]device.ID, error) { return nil, nil }
