package watcher

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/notify"
	"github.com/devicewarden/devicewarden/internal/policy"
)

type alerts struct {
	mu  sync.Mutex
	got []notify.AlertInput
}

func (a *alerts) Alert(_ context.Context, in notify.AlertInput) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, in)
	return nil
}

func (a *alerts) texts() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, in := range a.got {
		out = append(out, in.Text)
	}
	return out
}

func ambiguousReport() ResolveError {
	return ResolveError{Reason: ReasonAmbiguous, Key: "ns/p/train/claim:gpu/cdi-7", Claim: "ns/train-gpu",
		Candidates: []AllocatedDevice{{Request: "gpus", Driver: drv, Pool: "node-1", Device: "gpu-1"}, {Request: "gpus", Driver: drv, Pool: "node-1", Device: "gpu-2"}},
		Class:      func(string) string { return "gpu.example.com" }, Health: device.Unhealthy, Message: "XID 79",
		Reporter: api.Reporter{Namespace: "ns", Pod: "p", Container: "train"}, Node: "node-1"}
}

// The record of an ambiguous report says exactly what was seen: the entry's ID, the container, every
// candidate, the policy and the driver's message, on the Pod and on the claim (two Events with
// distinct names) and to the alerter; under quarantine-candidates every candidate is reported.
func TestAmbiguousReportRecord(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("uid-p")}}
	kube := fake.NewClientset()
	al := &alerts{}
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w := New(Config{Kube: kube, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Alerter: al,
		Clock: func() time.Time { return now }, Policies: policy.DefaultSet()})
	if got := w.ambiguous(pod, ambiguousReport()); got != nil {
		t.Fatalf("the default policy (alert) reported %v", got)
	}
	want := `Unhealthy report cdi-7 from container train could be any of 2 devices of claim ns/train-gpu (` + drv + `/node-1/gpu-1, ` + drv +
		`/node-1/gpu-2); policy "default": alert; driver message: XID 79`
	waitUntil(t, "events and alert", func() bool {
		evs, _ := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		return len(evs.Items) == 2 && len(al.texts()) == 1
	})
	evs, _ := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	var names []string
	for _, e := range evs.Items {
		if e.Message != want || e.Type != corev1.EventTypeWarning || e.Reason != EventAmbiguous || e.LastTimestamp.IsZero() {
			t.Fatalf("event %+v\nwant message %s", e, want)
		}
		names = append(names, e.Name)
	}
	sort.Strings(names)
	if names[0] == names[1] || !strings.HasPrefix(names[0], "p.") || !strings.HasPrefix(names[1], "train-gpu.") {
		t.Fatalf("event names %v", names)
	}
	if al.texts()[0] != want {
		t.Fatalf("alert %q", al.texts()[0])
	}
	// The same report again is counted, not recorded twice.
	w.ambiguous(pod, ambiguousReport())
	time.Sleep(50 * time.Millisecond)
	if evs, _ := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{}); len(evs.Items) != 2 || len(al.texts()) != 1 {
		t.Fatalf("recorded again: %d events, %d alerts", len(evs.Items), len(al.texts()))
	}

	quarantine, err := policy.Parse([]byte("default:\n  ambiguous: quarantine-candidates\n"))
	if err != nil {
		t.Fatal(err)
	}
	w.cfg.Policies = quarantine
	got := w.ambiguous(pod, ambiguousReport())
	if len(got) != 2 || got[1].Device.Device != "gpu-2" || got[0].Message != "ambiguous report, one of 2 devices: XID 79" ||
		got[0].DeviceClass != "gpu.example.com" || got[0].Node != "node-1" || got[0].Health != device.Unhealthy {
		t.Fatalf("candidates reported %+v", got)
	}
	healthy := ambiguousReport()
	healthy.Health = device.Healthy
	if got := w.ambiguous(pod, healthy); got != nil {
		t.Fatalf("a Healthy report about one of them reported %v", got)
	}
}
