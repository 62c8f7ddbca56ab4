package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// floorQueue is the task queue of the floor's own worker, apart from DeviceWarden's.
const floorQueue = "devicewarden-bench-floor"

// floorWorkflow waits for one signal, runs one local activity and ends: the least a signal-driven
// workflow that acts can cost.
func floorWorkflow(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteLocalActivity(lctx, floorActivity).Get(ctx, nil)
}

func floorActivity(context.Context) error { return nil }

// floorFigures are the parts of detect -> quarantine that no design can skip, measured one at a
// time on the same stack in the same run: a Pod status write seen through a watch, one
// signal-with-start whose workflow runs a local activity, and one object created and seen.
type floorFigures struct {
	watchEvent, signalActivity, create []time.Duration
}

func (f floorFigures) sumP50() time.Duration {
	return p50(f.watchEvent) + p50(f.signalActivity) + p50(f.create)
}

func p50[T time.Duration | float64](d []T) T {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func measureFloor(ctx context.Context, kube kubernetes.Interface, tc client.Client, samples int) (floorFigures, error) {
	var f floorFigures
	const ns = "bench"
	// A Pod no node runs: only this benchmark writes its status.
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "floor"},
		Spec:       corev1.PodSpec{NodeName: "bench-floor-no-node", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return f, fmt.Errorf("create floor pod: %w", err)
	}
	defer func() {
		_ = kube.CoreV1().Pods(ns).Delete(context.Background(), "floor", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	}()
	pw, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=floor", ResourceVersion: pod.ResourceVersion})
	if err != nil {
		return f, err
	}
	defer pw.Stop()
	for i := range samples {
		pod.Status.Message = "floor " + strconv.Itoa(i)
		start := time.Now()
		if pod, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			return f, fmt.Errorf("write floor pod status: %w", err)
		}
		if err := awaitEvent(ctx, pw.ResultChan(), func(ev watch.Event) bool {
			p, ok := ev.Object.(*corev1.Pod)
			return ok && p.Status.Message == pod.Status.Message
		}); err != nil {
			return f, err
		}
		f.watchEvent = append(f.watchEvent, time.Since(start))
	}

	w := worker.New(tc, floorQueue, worker.Options{})
	w.RegisterWorkflow(floorWorkflow)
	w.RegisterActivity(floorActivity)
	if err := w.Start(); err != nil {
		return f, fmt.Errorf("start floor worker: %w", err)
	}
	defer w.Stop()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range samples {
		start := time.Now()
		wr, err := tc.SignalWithStartWorkflow(ctx, "bench-floor-"+run+"-"+strconv.Itoa(i), "go", nil,
			client.StartWorkflowOptions{TaskQueue: floorQueue}, floorWorkflow)
		if err != nil {
			return f, fmt.Errorf("signal-with-start: %w", err)
		}
		if err := wr.Get(ctx, nil); err != nil {
			return f, err
		}
		f.signalActivity = append(f.signalActivity, time.Since(start))
	}

	seen, stop, err := watchRules(ctx, kube, watch.Added)
	if err != nil {
		return f, err
	}
	defer stop()
	for i := range samples {
		name := "bench-floor-" + run + "-" + strconv.Itoa(i)
		rule := &resourcev1.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To("floor.bench.devicewarden.io"), Pool: ptr.To("none"), Device: ptr.To("none")},
				Taint:          resourcev1.DeviceTaint{Key: "bench.devicewarden.io/floor", Effect: resourcev1.DeviceTaintEffectNoSchedule},
			},
		}
		start := time.Now()
		if _, err := kube.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
			return f, fmt.Errorf("create floor rule: %w", err)
		}
		select {
		case at := <-seen(name):
			f.create = append(f.create, at.Sub(start))
		case <-time.After(30 * time.Second):
			return f, fmt.Errorf("floor rule %s not seen after 30s", name)
		case <-ctx.Done():
			return f, ctx.Err()
		}
		_ = kube.ResourceV1().DeviceTaintRules().Delete(ctx, name, metav1.DeleteOptions{})
	}
	return f, nil
}

func awaitEvent(ctx context.Context, ch <-chan watch.Event, match func(watch.Event) bool) error {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return fmt.Errorf("watch closed")
			}
			if match(ev) {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("no watch event after 30s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// printFloor prints the floor's parts and how the measured path compares with their sum.
func printFloor(out io.Writer, f floorFigures, measured []time.Duration) {
	printLatency(out, "floor: Pod status write -> watch event", f.watchEvent)
	printLatency(out, "floor: signal-with-start -> local activity -> workflow closed", f.signalActivity)
	printLatency(out, "floor: DeviceTaintRule create -> watch event", f.create)
	sum := f.sumP50()
	fmt.Fprintf(out, "floor p50 sum %.1fms; detect -> quarantine p50 %.1fms = %.2fx the floor\n",
		ms(sum), ms(p50(measured)), float64(p50(measured))/float64(sum))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
