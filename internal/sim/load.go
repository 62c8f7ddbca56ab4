package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// LoadImage is the simulated load test an enforcement proof runs: a Pod with this image, once
// its load's time is up, ends with the figures a real load test would measure on its device, from
// the shares of the loads running there together and whether the node's driver enforces them.
const LoadImage = "sim.devicewarden.io/load"

// AnnotationUnenforced makes the node's DRA driver publish shared devices without enforcing the
// shares: a tenant that uses more than its share takes it from the others.
const AnnotationUnenforced = "sim.devicewarden.io/unenforced"

// AnnotationDriverVersion is the version the node's DRA driver publishes as each device's
// driverVersion attribute.
const AnnotationDriverVersion = "sim.devicewarden.io/driver-version"

// What one simulated device does alone: its throughput, and the p99 latency of its operations.
const (
	LoadThroughput = 1000.0
	LoadP99Ms      = 10.0
)

// isLoad says whether the Pod runs the simulated load test.
func isLoad(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Image == LoadImage {
			return true
		}
	}
	return false
}

// loadRun is one load Pod in its run: what it tries to use, what it may use, and when it ends.
type loadRun struct {
	pod    *corev1.Pod
	device string // pool/device
	node   string
	start  string
	demand float64
	share  float64
	ends   time.Time
	bad    string
}

// readLoad reads a load Pod's part from its environment and its claim's allocation.
func (k *Kubelet) readLoad(ctx context.Context, pod *corev1.Pod) loadRun {
	l := loadRun{pod: pod, node: pod.Spec.NodeName}
	env := map[string]string{}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
	}
	start, err := time.Parse(time.RFC3339Nano, env["DEVICEWARDEN_START_AT"])
	if err != nil {
		l.bad = "DEVICEWARDEN_START_AT: " + err.Error()
		return l
	}
	d, err := time.ParseDuration(env["DEVICEWARDEN_DURATION"])
	if err != nil {
		l.bad = "DEVICEWARDEN_DURATION: " + err.Error()
		return l
	}
	if l.demand, err = strconv.ParseFloat(env["DEVICEWARDEN_DEMAND_FRACTION"], 64); err != nil || !(l.demand > 0) {
		l.bad = fmt.Sprintf("DEVICEWARDEN_DEMAND_FRACTION %q: want a positive fraction", env["DEVICEWARDEN_DEMAND_FRACTION"])
		return l
	}
	l.start, l.ends = env["DEVICEWARDEN_START_AT"], start.Add(d)
	for _, rc := range pod.Spec.ResourceClaims {
		name := claimName(pod, rc)
		if name == "" {
			continue
		}
		claim, err := k.Kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != Driver {
				continue
			}
			l.device = r.Pool + "/" + r.Device
			q := r.ConsumedCapacity["memory"]
			slice, err := k.Kube.ResourceV1().ResourceSlices().Get(ctx, SliceName(r.Pool), metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, dev := range slice.Spec.Devices {
				if c, ok := dev.Capacity["memory"]; ok && dev.Name == r.Device && c.Value.Sign() > 0 {
					l.share = q.AsApproximateFloat64() / c.Value.AsApproximateFloat64()
				}
			}
		}
	}
	if l.device == "" || l.share == 0 {
		l.bad = "no share of a simulated device's memory allocated to the load"
	}
	return l
}

// runLoads ends, at the end of their run, the load Pods among the running ones, each group of
// loads that started together on one device at once.
func (k *Kubelet) runLoads(ctx context.Context, pods []corev1.Pod, now time.Time) error {
	groups := map[string][]loadRun{}
	var order []string
	for i := range pods {
		p := &pods[i]
		if !runsToCompletion(p) || !isLoad(p) {
			continue
		}
		l := k.readLoad(ctx, p)
		if l.bad != "" {
			if err := k.endLoad(ctx, l, nil); err != nil {
				return err
			}
			continue
		}
		key := l.device + "@" + l.start
		if groups[key] == nil {
			order = append(order, key)
		}
		groups[key] = append(groups[key], l)
	}
	unenforced := map[string]bool{}
	for _, key := range order {
		g := groups[key]
		if now.Before(g[0].ends) {
			continue
		}
		node, ok := unenforced[g[0].node]
		if !ok {
			n, err := k.Kube.CoreV1().Nodes().Get(ctx, g[0].node, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get node %s: %w", g[0].node, err)
			}
			node = n.Annotations[AnnotationUnenforced] == "true"
			unenforced[g[0].node] = node
		}
		for i, r := range LoadFigures(g, !node) {
			if err := k.endLoad(ctx, g[i], &r); err != nil {
				return err
			}
		}
	}
	return nil
}

// LoadFigures is what each load of a group that ran together on one device measures. A driver that
// enforces gives each what it asks up to its share, at the device's own latency. One that does
// not gives each what it asks while the device has room, and shares the device in proportion to
// what they ask once they ask for more than all of it, their latency growing with the overload.
func LoadFigures(g []loadRun, enforced bool) []rolloutplan.LoadResult {
	asked := 0.0
	for _, l := range g {
		asked += l.demand
	}
	out := make([]rolloutplan.LoadResult, len(g))
	for i, l := range g {
		got, p99 := min(l.demand, l.share), LoadP99Ms
		if !enforced {
			got, p99 = l.demand, LoadP99Ms*max(1, asked)
			if asked > 1 {
				got = l.demand / asked
			}
		}
		out[i] = rolloutplan.LoadResult{Throughput: math.Round(got*LoadThroughput*10) / 10, P99Ms: math.Round(p99*100) / 100}
	}
	return out
}

// endLoad ends a load Pod: Succeeded with its figures as its termination message, or Failed with
// what was wrong with its part.
func (k *Kubelet) endLoad(ctx context.Context, l loadRun, r *rolloutplan.LoadResult) error {
	exit, reason, phase, msg := int32(0), "Completed", corev1.PodSucceeded, ""
	if r == nil {
		exit, reason, phase, msg = 2, "Error", corev1.PodFailed, "load: "+l.bad
	} else {
		b, _ := json.Marshal(r)
		msg = string(b)
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := k.Kube.CoreV1().Pods(l.pod.Namespace).Get(ctx, l.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Status.Phase != corev1.PodRunning {
			return nil
		}
		now := metav1.Now()
		cur.Status.Phase = phase
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			started := metav1.Time{}
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.Ready = false
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason, Message: msg, StartedAt: started, FinishedAt: now}}
		}
		_, err = k.Kube.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}
