package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// WatcherOptions configures the watcher benchmark.
type WatcherOptions struct {
	Pods          int
	DevicesPerPod int
	// Updates is the size of the status-update storm; half change a device's health, half change
	// only an unrelated field (as readiness updates do), which the watcher must deduplicate.
	Updates     int
	Concurrency int
	CacheDir    string
	Out         io.Writer
	// Lean, when set, is the lean binary whose `run` is the watcher process, against the embedded
	// Temporal server in a process of its own; the storm's device workflows are then measured live.
	// Empty: the watcher alone in a child process, with a counting signaler in place of Temporal.
	Lean string
	// RunArgs are more flags for the lean binary's run (--workflow-cache-size=N).
	RunArgs []string
	// ServerSettings are dynamic config key=value overrides for the embedded Temporal server.
	ServerSettings []string
	// Sit is how long the live workflows are measured sitting on their timers.
	Sit time.Duration
}

const fleetNS = "fleet"

// Watcher loads a fleet of pods whose status carries device health into a real apiserver,
// starts the watcher in a child process, and measures it during a storm of status updates.
func Watcher(ctx context.Context, o WatcherOptions) error {
	dir, err := os.MkdirTemp("", "devicewarden-wbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cl, kube, err := startCluster(ctx, dir, o.CacheDir, o.Out, true, 5000, 5000)
	if err != nil {
		return err
	}
	defer cl.Stop()
	start := time.Now()
	pods, err := loadFleet(ctx, kube, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "[bench] loaded %d pods, %d device health entries in %s\n", o.Pods, o.Pods*o.DevicesPerPod, time.Since(start).Round(time.Second))

	var child, server *exec.Cmd
	var stats <-chan childStats
	var address string
	if o.Lean == "" {
		child, stats, err = startChild(ctx, cl.Kubeconfig)
	} else {
		server, address, err = startTemporalChild(ctx, filepath.Join(dir, "temporal"), o.ServerSettings)
		if err != nil {
			return err
		}
		defer func() { _ = server.Process.Kill(); _ = server.Wait() }()
		policyFile := filepath.Join(dir, "policy.yaml")
		// Unknown devices sit on their tolerance timer for the whole bench instead of being restricted.
		if err = os.WriteFile(policyFile, []byte("default:\n  toleranceWindow: 24h\n  backoffCap: 24h\n"), 0o644); err != nil {
			return err
		}
		child, stats, err = startRun(ctx, o.Lean, cl.Kubeconfig, address, filepath.Join(dir, "watcher"), policyFile, o.RunArgs...)
	}
	if err != nil {
		return err
	}
	defer func() {
		// SIGTERM first: a child asked to profile writes its profile out as it stops.
		_ = child.Process.Signal(syscall.SIGTERM)
		t := time.AfterFunc(10*time.Second, func() { _ = child.Process.Kill() })
		_ = child.Wait()
		t.Stop()
	}()
	synced := time.Now()
	initial, err := waitStats(ctx, stats, 10*time.Minute, func(s childStats) bool { return s.Synced && s.PodEvents >= float64(o.Pods) && s.Queue == 0 })
	if err != nil {
		return fmt.Errorf("watcher initial sync: %w", err)
	}
	fmt.Fprintf(o.Out, "[bench] watcher synced %d pods in %s: %.1f CPU-s, RSS %.0f MiB\n", o.Pods, time.Since(synced).Round(time.Millisecond), initial.CPUSeconds, initial.RSSMiB)

	stormStart := time.Now()
	cp := startCPU(cl.Pids())
	turned, err := storm(ctx, kube, pods, o)
	if err != nil {
		return err
	}
	sent := time.Since(stormStart)
	final, err := waitStats(ctx, stats, 10*time.Minute, func(s childStats) bool {
		return s.PodEvents >= initial.PodEvents+float64(o.Updates) && s.Queue == 0
	})
	if err != nil {
		return fmt.Errorf("watcher storm: %w", err)
	}
	spent := cp.stop()
	cpu := final.CPUSeconds - initial.CPUSeconds
	processed := final.PodEvents - initial.PodEvents
	control := (spent.procs["kube-apiserver"] + spent.procs["etcd"]).Seconds()
	signals := final.Signals - initial.Signals
	dedup := final.Dedup - initial.Dedup + final.SkippedHealthy - initial.SkippedHealthy
	fmt.Fprintf(o.Out, "[bench] storm: %d status updates written in %s (%.0f/s, bounded by the apiserver on this machine)\n", o.Updates, sent.Round(time.Millisecond), float64(o.Updates)/sent.Seconds())
	fmt.Fprintf(o.Out, "watcher @ %d pods / %d entries: RSS %.0f MiB after sync, %.0f MiB after storm; %.0f updates processed in %.2f CPU-s = %.0f updates per CPU-second; signals %.0f; device updates not sent to Temporal %.0f (dedup ratio %.2f); base RSS %.0f MiB\n",
		o.Pods, o.Pods*o.DevicesPerPod, initial.RSSMiB, final.RSSMiB, processed, cpu, processed/cpu, signals, dedup, (float64(o.Updates)-signals)/float64(o.Updates), initial.BaseRSSMiB)
	fmt.Fprintf(o.Out, "watcher CPU over the same updates: %.2f CPU-s vs kube-apiserver + etcd %.2f CPU-s = %.1f%% of the control plane's cost\n",
		cpu, control, 100*cpu/control)
	if o.Lean == "" {
		return nil
	}
	if len(turned) == 0 {
		return fmt.Errorf("the storm turned no device Unknown: give more --updates")
	}
	return liveWorkflows(ctx, o.Out, server, child, address, filepath.Join(dir, "temporal"), o.Lean, len(turned), stormStart, turned[0], o.Sit)
}

func startChild(ctx context.Context, kubeconfig string) (*exec.Cmd, <-chan childStats, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, self, "bench", "watcher-child", "--kubeconfig", kubeconfig, "--log-level", "error")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start watcher child: %w", err)
	}
	ch := make(chan childStats, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var s childStats
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				select {
				case ch <- s:
				default: // the reader only needs recent lines
				}
			}
		}
	}()
	return cmd, ch, nil
}

func waitStats(ctx context.Context, stats <-chan childStats, timeout time.Duration, done func(childStats) bool) (childStats, error) {
	deadline := time.After(timeout)
	var last childStats
	for {
		select {
		case s, ok := <-stats:
			if !ok {
				return last, fmt.Errorf("watcher child exited")
			}
			last = s
			if done(s) {
				return s, nil
			}
		case <-deadline:
			return last, fmt.Errorf("timed out; last %+v", last)
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}

// loadFleet creates claims with allocations and bound pods whose status reports every device
// Healthy, as kubelet would; nodes are plain objects so nothing else acts on the pods.
func loadFleet(ctx context.Context, kube kubernetes.Interface, o WatcherOptions) ([]*corev1.Pod, error) {
	if err := sim.EnsureNamespace(ctx, kube, fleetNS); err != nil {
		return nil, err
	}
	const podsPerNode = 100
	pods := make([]*corev1.Pod, o.Pods)
	var done atomic.Int64
	stop := progress(o.Out, "loading pods", &done, int64(o.Pods))
	defer stop()
	err := parallel(ctx, o.Concurrency, o.Pods, func(i int) error {
		node := fmt.Sprintf("fleet-node-%d", i/podsPerNode)
		if i%podsPerNode == 0 {
			if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create node: %w", err)
			}
		}
		p, err := createFleetPod(ctx, kube, i, node, o.DevicesPerPod)
		if err != nil {
			return err
		}
		pods[i] = p
		done.Add(1)
		return nil
	})
	return pods, err
}

func createFleetPod(ctx context.Context, kube kubernetes.Interface, i int, node string, devices int) (*corev1.Pod, error) {
	name := fmt.Sprintf("p-%d", i)
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fleetNS},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(devices)}}}}},
	}
	c, err := kube.ResourceV1().ResourceClaims(fleetNS).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create claim: %w", err)
	}
	slot := (i % 100) * devices
	var results []resourcev1.DeviceRequestAllocationResult
	var health []corev1.ResourceHealth
	for d := 0; d < devices; d++ {
		id := device.ID{Driver: sim.Driver, Pool: node, Device: fmt.Sprintf("gpu-%d", slot+d)}
		results = append(results, resourcev1.DeviceRequestAllocationResult{Request: "gpus", Driver: id.Driver, Pool: id.Pool, Device: id.Device})
		health = append(health, corev1.ResourceHealth{ResourceID: corev1.ResourceID(id.String()), Health: corev1.ResourceHealthStatusHealthy})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fleetNS},
		Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To(name)}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}}},
	}
	p, err := kube.CoreV1().Pods(fleetNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	// Allocated and reserved for the pod, as the scheduler leaves it.
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	if _, err := kube.ResourceV1().ResourceClaims(fleetNS).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("allocate claim: %w", err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "registry.invalid/trainer:1", Ready: true,
		AllocatedResourcesStatus: []corev1.ResourceStatus{{Name: "claim:gpus", Resources: health}}}}
	return kube.CoreV1().Pods(fleetNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
}

// storm writes o.Updates status updates; each goroutine owns a slice of pods, so no update conflicts.
// It returns the devices it turned Unknown at least once (each now has a workflow), sorted.
func storm(ctx context.Context, kube kubernetes.Interface, pods []*corev1.Pod, o WatcherOptions) ([]string, error) {
	var turnedMu sync.Mutex
	turnedSet := map[string]bool{}
	var done atomic.Int64
	stop := progress(o.Out, "status updates", &done, int64(o.Updates))
	defer stop()
	var wg sync.WaitGroup
	errc := make(chan error, o.Concurrency)
	for g := 0; g < o.Concurrency; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var owned []int // this goroutine's pods: i % Concurrency == g
			for i := g; i < len(pods); i += o.Concurrency {
				owned = append(owned, i)
			}
			if len(owned) == 0 {
				return
			}
			for j, k := 0, g; k < o.Updates; j, k = j+1, k+o.Concurrency {
				i := owned[j%len(owned)]
				p := pods[i].DeepCopy()
				cs := &p.Status.ContainerStatuses[0]
				if j%2 == 0 { // alternate health changes and unrelated changes on the same pods
					r := &cs.AllocatedResourcesStatus[0].Resources[(k/2)%len(cs.AllocatedResourcesStatus[0].Resources)]
					if r.Health == corev1.ResourceHealthStatusHealthy {
						r.Health = corev1.ResourceHealthStatusUnknown
						turnedMu.Lock()
						turnedSet[string(r.ResourceID)] = true
						turnedMu.Unlock()
					} else {
						r.Health = corev1.ResourceHealthStatusHealthy
						turnedMu.Lock()
						delete(turnedSet, string(r.ResourceID)) // back to Healthy: no workflow stays
						turnedMu.Unlock()
					}
				} else {
					cs.RestartCount++ // unrelated to device health
				}
				up, err := kube.CoreV1().Pods(fleetNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				if err != nil {
					errc <- fmt.Errorf("storm update: %w", err)
					return
				}
				pods[i] = up
				done.Add(1)
			}
		}(g)
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	turned := make([]string, 0, len(turnedSet))
	for id := range turnedSet {
		turned = append(turned, id)
	}
	slices.Sort(turned)
	return turned, nil
}

func parallel(ctx context.Context, workers, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func progress(out io.Writer, what string, done *atomic.Int64, total int64) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Fprintf(out, "[bench] %s: %d/%d\n", what, done.Load(), total)
			}
		}
	}()
	return func() { close(stop) }
}
