package devicehistory

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

var (
	gpu0 = device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"}
	gpu1 = device.ID{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-1"}
	now  = time.Date(2100, 1, 31, 0, 0, 0, 0, time.UTC)
)

func record(t *testing.T, a *Activities, node string) *corev1.ConfigMap {
	t.Helper()
	cm, err := a.Kube.CoreV1().ConfigMaps(kubeobj.Own(a.OwnNamespace)).Get(context.Background(), kubeobj.HistoryName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("record of %s: %v", node, err)
	}
	return cm
}

// Two devices of one node share its record; each reads back its own entry, and a run whose
// history is empty removes its entry (the record goes with its last one).
func TestDevicesOfANodeShareItsRecord(t *testing.T) {
	ctx := context.Background()
	a := &Activities{Kube: fake.NewClientset(), OwnNamespace: "dw"}
	h0 := decide.History{AppFaults: []time.Time{now.Add(-time.Minute)}, AppFaultsTotal: 1, LastAppFault: "10"}
	h1 := decide.History{Closed: []decide.ClosedQuarantine{{CreatedAt: now.Add(-24 * time.Hour), ClosedAt: now.Add(-23 * time.Hour), State: decide.Quarantined}}}
	for _, w := range []WriteInput{{Node: "node-1", Device: gpu0, History: h0, Now: now}, {Node: "node-1", Device: gpu1, History: h1, Now: now}} {
		if err := a.WriteDeviceHistory(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[device.ID]decide.History{gpu0: h0, gpu1: h1} {
		got, err := a.ReadDeviceHistory(ctx, ReadInput{Node: "node-1", Device: id})
		if err != nil || !got.Equal(want) {
			t.Fatalf("%s reads %+v (%v), want %+v", id, got, err, want)
		}
	}
	if cm := record(t, a, "node-1"); cm.Labels[kubeobj.LabelHistory] != "true" || cm.Annotations[kubeobj.AnnotationHistoryNode] != "node-1" {
		t.Fatalf("record's labels %v, annotations %v", cm.Labels, cm.Annotations)
	}
	if err := a.WriteDeviceHistory(ctx, WriteInput{Node: "node-1", Device: gpu0, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.ReadDeviceHistory(ctx, ReadInput{Node: "node-1", Device: gpu0}); !got.Empty() {
		t.Fatalf("an emptied entry reads %+v", got)
	}
	if err := a.WriteDeviceHistory(ctx, WriteInput{Node: "node-1", Device: gpu1, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Kube.CoreV1().ConfigMaps("dw").Get(ctx, kubeobj.HistoryName("node-1"), metav1.GetOptions{}); err == nil {
		t.Fatal("a record with no entries left stays")
	}
}

// A write prunes the other devices' entries of what no policy counts any more: quarantines and
// application faults older than 30 days.
func TestAWritePrunesWhatNoPolicyCounts(t *testing.T) {
	ctx := context.Background()
	a := &Activities{Kube: fake.NewClientset()}
	old := decide.History{AppFaults: []time.Time{now.Add(-31 * 24 * time.Hour)}, AppFaultsTotal: 1,
		Closed: []decide.ClosedQuarantine{{CreatedAt: now.Add(-40 * 24 * time.Hour), State: decide.Quarantined}}}
	if err := a.WriteDeviceHistory(ctx, WriteInput{Node: "node-1", Device: gpu1, History: old, Now: now.Add(-40 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	h0 := decide.History{AppFaults: []time.Time{now}, AppFaultsTotal: 1}
	if err := a.WriteDeviceHistory(ctx, WriteInput{Node: "node-1", Device: gpu0, History: h0, Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.ReadDeviceHistory(ctx, ReadInput{Node: "node-1", Device: gpu1}); !got.Empty() {
		t.Fatalf("an entry past every window stays: %+v", got)
	}
}

// A record someone broke by hand reads as no history (fencing never waits on it), and the next
// write keeps the broken text under a key of its own instead of losing it.
func TestABrokenRecordIsKeptAside(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kubeobj.HistoryName("node-1"), Namespace: kubeobj.Own("")},
		Data: map[string]string{kubeobj.HistoryKey: `{"gpu.example.com/node-1/gpu-0": {"appFaults": "yesterday"`}}
	a := &Activities{Kube: fake.NewClientset(cm)}
	got, err := a.ReadDeviceHistory(ctx, ReadInput{Node: "node-1", Device: gpu0})
	if err != nil || !got.Empty() {
		t.Fatalf("a broken record reads %+v, %v", got, err)
	}
	h := decide.History{AppFaults: []time.Time{now}, AppFaultsTotal: 1}
	if err := a.WriteDeviceHistory(ctx, WriteInput{Node: "node-1", Device: gpu0, History: h, Now: now}); err != nil {
		t.Fatal(err)
	}
	after := record(t, a, "node-1")
	if !strings.Contains(after.Data[kubeobj.HistoryUnreadableKey], "yesterday") {
		t.Fatalf("the broken text is gone: %v", after.Data)
	}
	if got, _ := a.ReadDeviceHistory(ctx, ReadInput{Node: "node-1", Device: gpu0}); !got.Equal(h) {
		t.Fatalf("after the write the device reads %+v", got)
	}
}

// A node whose name is as long as an object name may be still gets a record with a valid name,
// one no other node's shares.
func TestLongNodeNamesMakeValidRecordNames(t *testing.T) {
	long := strings.Repeat("n", 253)
	other := strings.Repeat("n", 252) + "m"
	if n := kubeobj.HistoryName(long); len(n) > 253 || n == kubeobj.HistoryName(other) {
		t.Fatalf("names %q (%d) and %q", n, len(n), kubeobj.HistoryName(other))
	}
	if kubeobj.HistoryName("node-1") != "devicewarden-history-node-1" {
		t.Fatalf("short name %q", kubeobj.HistoryName("node-1"))
	}
}

// A write that changes nothing (a retried activity, a run that wrote what it read) updates
// nothing: the apiserver is asked nothing but the read.
func TestAWriteThatChangesNothingUpdatesNothing(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	a := &Activities{Kube: kube, OwnNamespace: "dw"}
	w := WriteInput{Node: "node-1", Device: gpu0, History: decide.History{AppFaults: []time.Time{now.Add(-time.Minute)}, AppFaultsTotal: 1}, Now: now}
	if err := a.WriteDeviceHistory(ctx, w); err != nil {
		t.Fatal(err)
	}
	kube.ClearActions()
	if err := a.WriteDeviceHistory(ctx, w); err != nil {
		t.Fatal(err)
	}
	for _, act := range kube.Actions() {
		if act.GetVerb() != "get" {
			t.Fatalf("the same entry written again: %s %s", act.GetVerb(), act.GetResource().Resource)
		}
	}
}
