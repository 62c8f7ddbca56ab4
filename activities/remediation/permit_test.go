package remediation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/escalation"
)

// breakerAnswer is a BreakerClient that answers from a list and records the requests.
type breakerAnswer struct {
	res  breaker.PermitResult
	err  error
	reqs []breaker.PermitRequest
}

func (b *breakerAnswer) Acquire(_ context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	b.reqs = append(b.reqs, req)
	return b.res, b.err
}

func slice(name string, devices int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "d"})
	}
	return s
}

func permit(t *testing.T, b *breakerAnswer, calls int, in PermitInput) ([]breaker.PermitResult, *Activities, error) {
	t.Helper()
	env, a, kube := activityEnv(t, slice("node-1", 3), slice("node-2", 5))
	a.Breaker, a.BreakerConfig = b, breaker.Config{Window: time.Minute, MaxCount: 4}
	var out []breaker.PermitResult
	for i := range calls {
		if i == 1 { // a slice published after the first count is not seen until the cache expires
			if _, err := kube.ResourceV1().ResourceSlices().Create(context.Background(), slice("node-3", 8), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		v, err := env.ExecuteActivity(a.AcquirePermit, in)
		if err != nil {
			return out, a, err
		}
		var res breaker.PermitResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out, a, nil
}

func TestAcquirePermitGranted(t *testing.T) {
	b := &breakerAnswer{res: breaker.PermitResult{Granted: true}}
	in := PermitInput{Device: gpu3, Action: decide.Quarantined, Woken: true}
	res, a, err := permit(t, b, 2, in)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Granted || !res[1].Granted {
		t.Fatalf("results %+v", res)
	}
	req := b.reqs[0]
	if req.Device != gpu3 || req.Action != decide.Quarantined || !req.Woken || req.Config.MaxCount != 4 {
		t.Fatalf("request %+v", req)
	}
	// The fleet size is counted from the slices once and cached.
	if b.reqs[0].KnownDevices != 8 || b.reqs[1].KnownDevices != 8 {
		t.Fatalf("known devices %d then %d, want 8 (cached)", b.reqs[0].KnownDevices, b.reqs[1].KnownDevices)
	}
	if n := testutil.ToFloat64(a.Metrics.Permits.WithLabelValues("granted")); n != 2 {
		t.Errorf("granted metric %v", n)
	}
}

func TestAcquirePermitDeniedAndTripped(t *testing.T) {
	b := &breakerAnswer{res: breaker.PermitResult{Reason: "circuit breaker open: cap of 4", Tripped: true}}
	res, a, err := permit(t, b, 1, PermitInput{Device: gpu3, Action: decide.Restricted})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Granted || res[0].Reason != "circuit breaker open: cap of 4" {
		t.Fatalf("result %+v", res[0])
	}
	if n := testutil.ToFloat64(a.Metrics.Permits.WithLabelValues("denied")); n != 1 {
		t.Errorf("denied metric %v", n)
	}
	if n := testutil.ToFloat64(a.Metrics.BreakerTrips); n != 1 {
		t.Errorf("trips metric %v", n)
	}
}

func TestAcquirePermitBreakerUnreachable(t *testing.T) {
	b := &breakerAnswer{err: errors.New("connection refused")}
	_, a, err := permit(t, b, 1, PermitInput{Device: gpu3, Action: decide.Quarantined})
	if err == nil || !strings.Contains(err.Error(), "acquire permit for "+gpu3.String()) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err %v", err)
	}
	if n := testutil.CollectAndCount(a.Metrics.Permits); n != 0 {
		t.Errorf("a failed request was counted as an answer (%d series)", n)
	}
}

// nodeReports records the failures handed to node workflows.
type nodeReports struct {
	got []escalation.NodeFailure
	err error
}

func (n *nodeReports) DeviceFailed(_ context.Context, f escalation.NodeFailure) error {
	n.got = append(n.got, f)
	return n.err
}

func TestReportNodeFailure(t *testing.T) {
	f := escalation.NodeFailure{Node: "node-1", Device: gpu3.String(), State: decide.Quarantined, Threshold: 2}
	env, a, _ := activityEnv(t)
	if _, err := env.ExecuteActivity(a.ReportNodeFailure, f); err != nil {
		t.Fatalf("without a node reporter: %v", err)
	}
	nodes := &nodeReports{}
	a.Nodes = nodes
	if _, err := env.ExecuteActivity(a.ReportNodeFailure, escalation.NodeFailure{Device: gpu3.String()}); err != nil || len(nodes.got) != 0 {
		t.Fatalf("a failure without a node: %v, reported %v", err, nodes.got)
	}
	if _, err := env.ExecuteActivity(a.ReportNodeFailure, f); err != nil || len(nodes.got) != 1 || nodes.got[0] != f {
		t.Fatalf("reported %v (%v)", nodes.got, err)
	}
	nodes.err = errors.New("namespace not found")
	_, err := env.ExecuteActivity(a.ReportNodeFailure, f)
	if err == nil || !strings.Contains(err.Error(), "report failure of "+gpu3.String()+" to node node-1") {
		t.Fatalf("err %v", err)
	}
}

// TestStaleDeviceCountIsRefreshedInTheBackground: once the count is older than its time to live,
// a permit request goes on with the old count and a recount runs beside it; a failed recount
// keeps the last count.
func TestStaleDeviceCountIsRefreshedInTheBackground(t *testing.T) {
	_, a, kube := activityEnv(t, slice("node-1", 3))
	ctx := context.Background()
	if n, err := (permitBook{a}).knownDevices(ctx); err != nil || n != 3 {
		t.Fatalf("first count %d, %v; want 3", n, err)
	}
	if _, err := kube.ResourceV1().ResourceSlices().Create(ctx, slice("node-2", 5), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := (permitBook{a}).knownDevices(ctx); n != 3 {
		t.Fatalf("count %d within its time to live, want the cached 3", n)
	}
	// A recount marks itself busy before the request returns and lists before it is done: either
	// shows if one started.
	a.devices.mu.Lock()
	busy := a.devices.refreshing
	a.devices.mu.Unlock()
	if lists := listsOf(kube, "resourceslices"); busy || lists != 1 {
		t.Fatalf("a recount started within the time to live (busy %v, %d lists)", busy, lists)
	}
	a.devices.mu.Lock()
	a.devices.ttl = time.Nanosecond
	a.devices.mu.Unlock()
	if n, _ := (permitBook{a}).knownDevices(ctx); n != 3 {
		t.Fatalf("stale count %d: the request waited for the recount, want the cached 3", n)
	}
	recounted := func(want int) bool {
		for range 500 {
			a.devices.mu.Lock()
			n, busy := a.devices.n, a.devices.refreshing
			a.devices.mu.Unlock()
			if n == want && !busy {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	if !recounted(8) {
		t.Fatal("the background recount never saw the new slice")
	}
	kube.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver down")
	})
	if n, _ := (permitBook{a}).knownDevices(ctx); n != 8 {
		t.Fatalf("count %d, want the cached 8", n)
	}
	if !recounted(8) {
		t.Fatal("a failed recount lost the last count")
	}
}

// listsOf counts the list calls made to a resource.
func listsOf(kube *fake.Clientset, resource string) int {
	n := 0
	for _, act := range kube.Actions() {
		if act.GetVerb() == "list" && act.GetResource().Resource == resource {
			n++
		}
	}
	return n
}
