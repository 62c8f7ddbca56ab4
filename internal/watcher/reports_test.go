package watcher

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

var reportGVR = schema.GroupVersionResource{Group: healthreport.Group, Version: healthreport.Version, Resource: healthreport.Resource}

func healthReport(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": healthreport.Group + "/" + healthreport.Version,
		"kind": healthreport.Kind, "metadata": map[string]any{"name": name}, "spec": spec}}
}

func byUUID(uuid, health, source string) map[string]any {
	return map[string]any{"node": "node-1", "attribute": map[string]any{"name": "uuid", "value": uuid}, "health": health,
		"cause": map[string]any{"code": "xid:79"}, "source": source}
}

// reportWatcher runs a watcher over node-1's slice of two GPUs (with their UUIDs) and the reports
// given; served says whether the apiserver serves the report API.
func reportWatcher(t *testing.T, served bool, reports ...runtime.Object) (*recorder, *dynamicfake.FakeDynamicClient, context.Context) {
	rec, dyn, ctx, _ := reportWatcherOn(t, served, reports...)
	return rec, dyn, ctx
}

// reportWatcherOn is reportWatcher, and the discovery that says whether the report API is served.
func reportWatcherOn(t *testing.T, served bool, reports ...runtime.Object) (*recorder, *dynamicfake.FakeDynamicClient, context.Context, *atomic.Bool) {
	return reportWatcherWith(t, served, 0, reports...)
}

// reportWatcherWith is reportWatcherOn with a report retention.
func reportWatcherWith(t *testing.T, served bool, retention time.Duration, reports ...runtime.Object) (*recorder, *dynamicfake.FakeDynamicClient, context.Context, *atomic.Bool) {
	return reportWatcherSetUp(t, served, retention, nil, nil, reports...)
}

// reportWatcherSetUp is reportWatcherWith, with setup run on the fake dynamic client first.
// clock, when set, is the watcher's clock.
func reportWatcherSetUp(t *testing.T, served bool, retention time.Duration, setup func(*dynamicfake.FakeDynamicClient), clock func() time.Time,
	reports ...runtime.Object) (*recorder, *dynamicfake.FakeDynamicClient, context.Context, *atomic.Bool) {
	t.Helper()
	slice := uuidSlice()
	kube := fake.NewSimpleClientset(slice)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: healthreport.Group + "/" + healthreport.Version,
		APIResources: []metav1.APIResource{{Name: healthreport.Resource, Kind: healthreport.Kind}}}}
	on := &atomic.Bool{}
	on.Store(served)
	kube.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		if on.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: healthreport.Group}, "")
	})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{reportGVR: healthreport.Kind + "List"}, reports...)
	if setup != nil {
		setup(dyn)
	}
	rec := &recorder{}
	w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2,
		Reports: dyn.Resource(reportGVR), ReportsRecheck: 20 * time.Millisecond, ReportRetention: retention, Clock: clock, WithdrawAfter: 10 * time.Millisecond})
	return rec, dyn, start(t, w), on
}

// uuidSlice is node-1's slice of two GPUs, gpu-0 and gpu-1, with their UUIDs GPU-aaaa and GPU-bbbb.
func uuidSlice() *resourcev1.ResourceSlice {
	gpu := func(name, uuid string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"uuid": {StringValue: ptr.To(uuid)}}}
	}
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: drv, NodeName: ptr.To("node-1"), Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{gpu("gpu-0", "GPU-aaaa"), gpu("gpu-1", "GPU-bbbb")}}}
}

func reportStatus(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) healthreport.Status {
	t.Helper()
	u, err := dyn.Resource(reportGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := healthreport.FromObject(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// A detector's fault reaches the one device it names, with its source, once: its word is
// withdrawn when the workflow has it, and its status says Delivered. A standing word (Unknown)
// stays until its detector changes it or deletes the report.
func TestAReportReachesItsDevice(t *testing.T) {
	rec, dyn, ctx := reportWatcher(t, true, healthReport("nvsentinel-1", byUUID("GPU-bbbb", "Unhealthy", "nvsentinel")))
	gpu1 := device.ID{Driver: drv, Pool: "node-1", Device: "gpu-1"}
	waitUntil(t, "the fault signalled, then withdrawn", func() bool { return len(rec.signals()) == 2 })
	got := rec.signals()[0]
	if got.Device != gpu1 || got.Health != device.Unhealthy || got.Source != devicemsg.SourceHealthReport || got.Node != "node-1" ||
		len(got.Reporters) != 1 || got.Reporters[0].Report != "nvsentinel-1" || got.Reporters[0].Detector != "nvsentinel" ||
		!strings.Contains(got.Message, "nvsentinel: xid:79") {
		t.Fatalf("signalled %+v", got)
	}
	if got := rec.signals()[1]; got.Device != gpu1 || got.Health != device.Healthy || len(got.Reporters) != 0 {
		t.Fatalf("after the workflow had the fault: %+v", got)
	}
	waitUntil(t, "the status written", func() bool { return reportStatus(t, dyn, "nvsentinel-1").Outcome == healthreport.Delivered })
	if st := reportStatus(t, dyn, "nvsentinel-1"); st.Device != gpu1.String() || st.Workflow != gpu1.WorkflowID() || st.Reason != "" {
		t.Fatalf("status %+v", st)
	}
	if _, err := dyn.Resource(reportGVR).Create(ctx, healthReport("dcgm-1", byUUID("GPU-bbbb", "Unknown", "dcgm")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the Unknown taken in", func() bool { return reportStatus(t, dyn, "dcgm-1").Outcome == healthreport.Resolved })
	waitUntil(t, "the Unknown signalled", func() bool { return len(rec.signals()) == 3 })
	time.Sleep(50 * time.Millisecond)
	if got := rec.signals(); len(got) != 3 || got[2].Health != device.Unknown || len(got[2].Reporters) != 1 || got[2].Reporters[0].Detector != "dcgm" {
		t.Fatalf("a standing word: %+v", got[2:])
	}
	if err := dyn.Resource(reportGVR).Delete(ctx, "dcgm-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the report withdrawn", func() bool { return len(rec.signals()) == 4 })
	if got := rec.signals()[3]; got.Device != gpu1 || got.Health != device.Healthy || len(got.Reporters) != 0 {
		t.Fatalf("after the report was deleted: %+v", got)
	}
}

// A fault whose status says Delivered at the report's generation is not sent again (a watcher
// that restarts); one delivered at another generation (its detector renewed it) is.
func TestADeliveredReportIsNotSentAgain(t *testing.T) {
	withStatus := func(name, uuid string, gen int64) *unstructured.Unstructured {
		u := healthReport(name, byUUID(uuid, "Unhealthy", "nvsentinel"))
		u.SetGeneration(3)
		u.Object["status"] = map[string]any{"outcome": healthreport.Delivered, "device": "x", "observedGeneration": gen}
		return u
	}
	rec, dyn, _ := reportWatcher(t, true, withStatus("sent", "GPU-aaaa", 3), withStatus("renewed", "GPU-bbbb", 2))
	waitUntil(t, "the renewed fault sent", func() bool { return len(rec.signals()) == 2 })
	time.Sleep(50 * time.Millisecond)
	for _, got := range rec.signals() {
		if got.Device.Device != "gpu-1" {
			t.Fatalf("a delivered fault was sent again: %+v", got)
		}
	}
	waitUntil(t, "its status", func() bool {
		st := reportStatus(t, dyn, "renewed")
		return st.ObservedGeneration == 3 && st.Device != "x"
	})
}

// A report that names no device, two devices, or an unknown health word is refused in its status,
// and nothing is signalled; a report that is mended is taken in.
func TestARefusedReportFencesNothing(t *testing.T) {
	two := byUUID("GPU-aaaa", "Unhealthy", "npd")
	two["attribute"] = map[string]any{"name": "uuid", "value": "GPU-AAAA"}
	rec, dyn, ctx := reportWatcher(t, true,
		healthReport("no-such", byUUID("GPU-cccc", "Unhealthy", "nvsentinel")),
		healthReport("odd-word", byUUID("GPU-aaaa", "Broken", "nvsentinel")),
		healthReport("no-device", map[string]any{"health": "Unhealthy", "source": "npd"}))
	for name, want := range map[string]string{
		"no-such":   "no such device: no device on node node-1 publishes uuid=GPU-cccc",
		"odd-word":  `unknown health value "Broken"`,
		"no-device": "names no device",
	} {
		waitUntil(t, name+" refused", func() bool { return reportStatus(t, dyn, name).Outcome == healthreport.Refused })
		if st := reportStatus(t, dyn, name); !strings.Contains(st.Reason, want) || st.Device != "" {
			t.Fatalf("%s: status %+v, want %q", name, st, want)
		}
	}
	u, err := dyn.Resource(reportGVR).Get(ctx, "odd-word", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"].(map[string]any)["health"] = "Unknown"
	if _, err := dyn.Resource(reportGVR).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the mended report signalled", func() bool { return len(rec.signals()) == 1 })
	if got := rec.signals()[0]; got.Device.Device != "gpu-0" || got.Health != device.Unknown {
		t.Fatalf("signalled %+v", got)
	}
	waitUntil(t, "the mended report's status", func() bool { return reportStatus(t, dyn, "odd-word").Outcome == healthreport.Resolved })
	if st := reportStatus(t, dyn, "odd-word"); st.Reason != "" || st.Device == "" {
		t.Fatalf("the mended report's status %+v", st)
	}
}

// Without the report API the watcher runs as before; once it is served, reports are read.
func TestReportsWaitForTheirAPI(t *testing.T) {
	rec, _, _, served := reportWatcherOn(t, false, healthReport("r", byUUID("GPU-aaaa", "Unhealthy", "nvsentinel")))
	time.Sleep(100 * time.Millisecond)
	if n := len(rec.signals()); n != 0 {
		t.Fatalf("%d signals without the report API", n)
	}
	served.Store(true)
	waitUntil(t, "the report read once its API is served", func() bool { return len(rec.signals()) >= 1 })
	if got := rec.signals()[0]; got.Device.Device != "gpu-0" || got.Health != device.Unhealthy {
		t.Fatalf("signalled %+v", got)
	}
}

// A report observed (or, without an observed time, created) longer ago than the retention is
// deleted and never taken in; a fresh one is.
func TestReportsPastTheirRetentionExpire(t *testing.T) {
	old := time.Now().Add(-48 * time.Hour)
	created := healthReport("created-long-ago", byUUID("GPU-aaaa", "Unhealthy", "nvsentinel"))
	created.SetCreationTimestamp(metav1.NewTime(old))
	observed := byUUID("GPU-aaaa", "Unhealthy", "dcgm")
	observed["observedTime"] = old.UTC().Format(time.RFC3339)
	fresh := healthReport("fresh", byUUID("GPU-bbbb", "Unhealthy", "npd"))
	fresh.SetCreationTimestamp(metav1.NewTime(old)) // created long ago, observed now: it stands
	fresh.Object["spec"].(map[string]any)["observedTime"] = time.Now().UTC().Format(time.RFC3339)
	rec, dyn, ctx, _ := reportWatcherWith(t, true, 24*time.Hour, created, healthReport("observed-long-ago", observed), fresh)
	for _, name := range []string{"created-long-ago", "observed-long-ago"} {
		waitUntil(t, name+" deleted", func() bool {
			_, err := dyn.Resource(reportGVR).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
	waitUntil(t, "the fresh report signalled", func() bool { return len(rec.signals()) == 2 })
	time.Sleep(50 * time.Millisecond)
	if got := rec.signals(); len(got) != 2 || got[0].Device.Device != "gpu-1" || got[0].Health != device.Unhealthy || got[1].Device.Device != "gpu-1" {
		t.Fatalf("signalled %+v", got)
	}
	if _, err := dyn.Resource(reportGVR).Get(ctx, "fresh", metav1.GetOptions{}); err != nil {
		t.Fatalf("the fresh report: %v", err)
	}
}

// A report that stood before the watcher started is read from the list (a watch from the list's
// version brings only what changes after), and one that expires while it stands is deleted by the
// periodic sweep, its word withdrawn.
func TestAReportStandingAtStartIsListedAndExpires(t *testing.T) {
	soon := healthReport("soon", byUUID("GPU-aaaa", "Unknown", "dcgm")) // a standing word
	soon.Object["spec"].(map[string]any)["observedTime"] = time.Now().UTC().Format(time.RFC3339Nano)
	var later atomic.Int64 // how far the watcher's clock is ahead
	clock := func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
	rec, dyn, ctx, _ := reportWatcherSetUp(t, true, time.Second, func(d *dynamicfake.FakeDynamicClient) {
		d.PrependWatchReactor(healthreport.Resource, func(k8stesting.Action) (bool, watch.Interface, error) { return true, watch.NewFake(), nil })
	}, clock, soon)
	waitUntil(t, "the standing report signalled", func() bool { return len(rec.signals()) == 1 })
	if got := rec.signals()[0]; got.Device.Device != "gpu-0" || got.Health != device.Unknown {
		t.Fatalf("signalled %+v", got)
	}
	later.Store(int64(time.Hour))
	waitUntil(t, "the report deleted by the sweep", func() bool {
		_, err := dyn.Resource(reportGVR).Get(ctx, "soon", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	waitUntil(t, "its word withdrawn", func() bool { return len(rec.signals()) == 2 })
	if got := rec.signals()[1]; got.Device.Device != "gpu-0" || got.Health != device.Healthy || len(got.Reporters) != 0 {
		t.Fatalf("after the sweep %+v", got)
	}
}

// A report that names its device by DRA name, without a node, is filed under the node its slice
// names; its status names the device.
func TestAReportByDRANameTakesTheSlicesNode(t *testing.T) {
	rec, dyn, _ := reportWatcher(t, true, healthReport("by-name", map[string]any{
		"device": map[string]any{"driver": drv, "pool": "node-1", "name": "gpu-1"}, "health": "Unknown", "source": "npd"}))
	waitUntil(t, "the report signalled", func() bool { return len(rec.signals()) == 1 })
	if got := rec.signals()[0]; got.Device.Device != "gpu-1" || got.Node != "node-1" || got.Health != device.Unknown {
		t.Fatalf("signalled %+v", got)
	}
	waitUntil(t, "its status", func() bool { return reportStatus(t, dyn, "by-name").Device == drv+"/node-1/gpu-1" })
}

// Without a retention, reports stand however old they are.
func TestReportsStandWithoutARetention(t *testing.T) {
	old := healthReport("old", byUUID("GPU-aaaa", "Unhealthy", "nvsentinel"))
	old.SetCreationTimestamp(metav1.NewTime(time.Now().Add(-365 * 24 * time.Hour)))
	rec, dyn, ctx, _ := reportWatcherWith(t, true, 0, old)
	waitUntil(t, "the old report signalled", func() bool { return len(rec.signals()) >= 1 })
	if _, err := dyn.Resource(reportGVR).Get(ctx, "old", metav1.GetOptions{}); err != nil {
		t.Fatalf("a report was deleted without a retention: %v", err)
	}
}

// A report's newer status replaces one not yet written: a flood writes each report once, oldest
// first.
func TestStatusWritesCoalesce(t *testing.T) {
	var s statusWriter
	s.put("a", healthreport.Status{Outcome: healthreport.Resolved})
	s.put("b", healthreport.Status{Outcome: healthreport.Refused})
	s.put("a", healthreport.Status{Outcome: healthreport.Delivered})
	var got []string
	for {
		name, st, _ := s.next()
		if name == "" {
			break
		}
		got = append(got, name+"="+st.Outcome)
	}
	if strings.Join(got, " ") != "a=Delivered b=Refused" {
		t.Fatalf("written %v", got)
	}
}

// Between a fault's withdrawal and its Delivered status (written asynchronously, and here refused
// by the apiserver all along), a relist by a new leader sends the same generation again: it
// carries the same one-time word, which the device's workflow ignores once it took it (rule
// TakenWords, internal/decide TestAWordSentAgainByANewLeaderFailsNoReview).
func TestARelistBeforeTheDeliveredWriteSendsTheSameWord(t *testing.T) {
	slice := uuidSlice()
	kube := fake.NewSimpleClientset(slice)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{GroupVersion: healthreport.Group + "/" + healthreport.Version,
		APIResources: []metav1.APIResource{{Name: healthreport.Resource, Kind: healthreport.Kind}}}}
	report := healthReport("nvsentinel-1", byUUID("GPU-bbbb", "Unhealthy", "nvsentinel"))
	report.SetGeneration(4)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{reportGVR: healthreport.Kind + "List"}, report)
	var refused atomic.Int32
	dyn.PrependReactor("patch", healthreport.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		refused.Add(1)
		return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
	})
	lead := func() []string {
		t.Helper()
		rec := &recorder{}
		w := New(Config{Kube: kube, Signaler: rec, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 2,
			Reports: dyn.Resource(reportGVR), ReportsRecheck: 20 * time.Millisecond, WithdrawAfter: 10 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitUntil(t, "the fault sent and withdrawn", func() bool { return len(rec.signals()) == 2 && refused.Load() > 0 })
		return rec.signals()[0].Words
	}
	first := lead()
	if st := reportStatus(t, dyn, "nvsentinel-1"); st.Outcome == healthreport.Delivered {
		t.Fatalf("the status was written (%+v): the window this test holds open closed", st)
	}
	again := lead()
	if len(first) != 1 || !slices.Equal(first, again) {
		t.Fatalf("the leader sent words %v, the relist after it %v", first, again)
	}
}
