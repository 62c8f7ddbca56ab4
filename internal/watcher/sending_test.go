package watcher

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/metrics"
)

// slowSignaler holds the first observation until its Pod is gone, as a workflow does that fences
// the device in the task that takes the observation, before the watcher hears it was taken.
type slowSignaler struct {
	recorder
	once   sync.Once
	during func()
}

func (s *slowSignaler) Signal(ctx context.Context, obs api.Observation) error {
	s.once.Do(s.during)
	return s.recorder.Signal(ctx, obs)
}

// A holder that leaves while the report it made is on its way is still reported gone: the device's
// workflow, which fenced the device on that report, must hear that no Pod holds it.
func TestHolderGoneWhileItsReportIsSentIsReported(t *testing.T) {
	p, c := holder("train", "gpu-0", "Unhealthy")
	kube := fake.NewSimpleClientset(p, c)
	// The fake clientset replays nothing to a watch that starts late: delete only once the
	// watcher watches Pods.
	watching := make(chan struct{})
	var once sync.Once
	kube.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wi, err := kube.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(watching) })
		return true, wi, err
	})
	var w *Watcher
	sig := &slowSignaler{}
	sig.during = func() {
		<-watching
		deletePodAndWait(t, kube, w, p.Namespace, p.Name)
	}
	w = New(Config{Kube: kube, Signaler: sig, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: 1})
	start(t, w)
	defer func() {
		if t.Failed() {
			for _, o := range sig.signals() {
				t.Logf("signalled %s %d reporters", o.Health, len(o.Reporters))
			}
		}
	}()
	waitUntil(t, "the workflow told no Pod holds the device", func() bool {
		got := sig.signals()
		return len(got) == 2 && got[0].Health == device.Unhealthy && len(got[0].Reporters) == 1 && len(got[1].Reporters) == 0
	})
}

// deletePodAndWait deletes the Pod and waits until the watcher has taken the deletion in.
func deletePodAndWait(t *testing.T, kube kubernetes.Interface, w *Watcher, ns, name string) {
	if err := kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
		return
	}
	waitUntil(t, "the deletion seen", func() bool { return !w.store.tracked(ns + "/" + name) })
}
