package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// fakeFleet answers from memory and counts what it was asked.
type fakeFleet struct {
	devices []Device
	states  map[device.ID]devicemsg.DeviceView
	lists   atomic.Int64
	slow    time.Duration
}

func (f *fakeFleet) Devices(context.Context) ([]Device, error) {
	f.lists.Add(1)
	time.Sleep(f.slow)
	return f.devices, nil
}

func (f *fakeFleet) Running(_ context.Context, workflowType string) ([]Flow, error) {
	since := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	if workflowType == "RolloutWorkflow" {
		return []Flow{{ID: "rollout/h100-dra", Started: since, Name: "h100-dra", Phase: "canary", State: "Soaking"}}, nil
	}
	return []Flow{{ID: "migrate/gpu.example.com/node-a/gpu-1/job-uid/10", Started: since}}, nil
}

func (f *fakeFleet) State(_ context.Context, id device.ID) (devicemsg.DeviceView, error) {
	st, ok := f.states[id]
	if id.Device == "gpu-9" {
		return st, errors.New("context deadline exceeded")
	}
	if !ok {
		return st, errors.New("workflow not found for ID: " + id.WorkflowID())
	}
	return st, nil
}

func (f *fakeFleet) Breaker(context.Context) (breaker.State, error) {
	return breaker.State{Config: breaker.Config{Window: 10 * time.Minute, MaxCount: 20}, Open: true, Reason: "20 automatic actions within 10m0s",
		Waiting: []string{"gpu.example.com/node-b/gpu-1"}}, nil
}

type fakeCluster []Node

func (c fakeCluster) Nodes(context.Context) ([]Node, error) { return c, nil }

func gpu(node string, i int) device.ID {
	return device.ID{Driver: "gpu.example.com", Pool: node, Device: "gpu-" + string(rune('0'+i))}
}

func testServer(t *testing.T) (*httptest.Server, *fakeFleet) {
	t.Helper()
	bad := gpu("node-a", 1)
	since := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	f := &fakeFleet{
		devices: []Device{{ID: bad, State: devicemsg.Quarantined, Node: "node-a", Forms: 1, Since: since, Repair: "reset 1/2", Cause: "xid 48 -> reset (catalogue: xid 48)"},
			{ID: gpu("node-gone", 0), State: devicemsg.Retired, Node: "node-gone", Forms: 1, Since: since}},
		states: map[device.ID]devicemsg.DeviceView{bad: {Device: bad, Node: "node-a", State: devicemsg.Quarantined, Health: device.Unhealthy,
			Quarantine:  &devicemsg.QuarantineView{RuleName: bad.TaintRuleName(), Effect: "NoExecute", Reason: "XID 79: fell off the bus", Actor: "devicewarden", CreatedAt: since},
			Transitions: []devicemsg.Transition{{From: devicemsg.Healthy, To: devicemsg.Quarantined, Reason: "XID 79", Actor: "devicewarden", At: since}}}},
	}
	nodes := fakeCluster{{Name: "node-a", Pool: "h100", Devices: []device.ID{gpu("node-a", 0), bad}},
		{Name: "node-b", Pool: "h100", Devices: []device.ID{gpu("node-b", 0), gpu("node-b", 1)}},
		{Name: "node-c", Pool: "", Devices: []device.ID{gpu("node-c", 0)}}}
	s := &Server{Cache: &Cache{Fleet: f, Cluster: nodes, Refresh: time.Hour}, UIURL: "http://ui.example:8233", Namespace: "dw", PageRefresh: 2 * time.Second,
		Events: func(_ context.Context, node string, id device.ID, _ []devicemsg.Reporter) ([]Event, error) {
			return []Event{{At: since, Type: "Warning", Reason: "DeviceQuarantined", Message: "device " + id.String() + " on " + node + " quarantined"}}, nil
		}}
	h, err := s.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, f
}

func newTestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The fleet page counts every device by state, draws the nodes that have a device out with one
// cell each (its state as its colour, its state and repair step on hover, a link to its page),
// collapses nodes with every device healthy, and says the breaker is open and why.
func TestFleetPage(t *testing.T) {
	srv, _ := testServer(t)
	code, body := get(t, srv.URL+"/")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{
		`All <b>6</b>`, `Healthy <b>4</b>`, `Quarantined <b>1</b>`, `Retired <b>1</b>`,
		`class="cell s-quarantined" href="/device?id=gpu.example.com%2Fnode-a%2Fgpu-1" title="gpu.example.com/node-a/gpu-1: Quarantined since 2026-12-03T10:00:00Z, repair reset 1/2, cause xid 48 -&gt; reset (catalogue: xid 48)"`,
		`<td class="node">node-a</td>`, `Node pool h100: 4 devices`, `1 nodes with every device Healthy`, `Circuit breaker: <b>open</b>: 20 automatic actions`,
		`Devices on no node in the inventory`, `gpu.example.com/node-gone/gpu-0`,
		`Waiting for the breaker (1)`, `href="/device?id=gpu.example.com%2Fnode-b%2Fgpu-1"`,
		`Migrations in flight: 1`, `href="/migration?id=migrate%2fgpu.example.com%2fnode-a%2fgpu-1%2fjob-uid%2f10"`,
		`Rollouts: 1`, `href="/rollout?id=rollout%2fh100-dra">h100-dra</a></td><td>canary</td><td>Soaking</td>`, `<meta http-equiv="refresh" content="2">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page lacks %q", want)
		}
	}
	if strings.Contains(body, `<td class="node">node-b</td>`) {
		t.Error("a node with every device healthy is drawn, not collapsed")
	}
	// Filters: a state, a node, a pool.
	_, body = get(t, srv.URL+"/?state=Healthy")
	if !strings.Contains(body, `<td class="node">node-b</td>`) || strings.Contains(body, `cell s-quarantined`) {
		t.Error("state filter: Healthy shows the healthy nodes' cells only")
	}
	_, body = get(t, srv.URL+"/?node=node-c&state=Healthy")
	if strings.Contains(body, `<td class="node">node-b</td>`) || !strings.Contains(body, `<td class="node">node-c</td>`) {
		t.Error("node filter")
	}
	_, body = get(t, srv.URL+"/?pool=h100&expand=1")
	if strings.Contains(body, "node-c") || !strings.Contains(body, `<span class="mono">node-b</span>`) {
		t.Error("pool filter, or the expanded healthy nodes")
	}
	_, body = get(t, srv.URL+"/?pool=(none)&expand=1")
	if !strings.Contains(body, `<span class="mono">node-c</span>`) || strings.Contains(body, `<span class="mono">node-b</span>`) || !strings.Contains(body, `<option value="(none)" selected>`) {
		t.Error("the nodes without a pool label")
	}
	_, body = get(t, srv.URL+"/")
	if strings.Contains(body, " selected>") {
		t.Error("an unfiltered page marks a filter selected")
	}
}

// A device's page shows its state, reason, rule, transitions and Events, and links to its
// workflow in the Temporal UI; a device with no workflow is Healthy with nothing to do; a
// malformed ID is refused.
func TestDevicePage(t *testing.T) {
	srv, _ := testServer(t)
	code, body := get(t, srv.URL+"/device?id=gpu.example.com/node-a/gpu-1")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{`id="state">Quarantined`, `id="reason">XID 79: fell off the bus`, `id="rule">` + gpu("node-a", 1).TaintRuleName() + ` (NoExecute)`,
		`DeviceQuarantined`, `href="http://ui.example:8233/namespaces/dw/workflows/device%2Fgpu.example.com%2Fnode-a%2Fgpu-1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("device page lacks %q", want)
		}
	}
	_, body = get(t, srv.URL+"/device?id=gpu.example.com/node-b/gpu-0")
	if !strings.Contains(body, `id="state">Healthy`) || !strings.Contains(body, "nothing: no report") {
		t.Errorf("a device without a workflow: %s", body)
	}
	_, body = get(t, srv.URL+"/device?id=gpu.example.com/node-b/gpu-9")
	if !strings.Contains(body, `<div class="errors">context deadline exceeded</div>`) || strings.Contains(body, `id="state"`) {
		t.Errorf("a workflow that does not answer: %s", body)
	}
	if !strings.Contains(body, "device gpu.example.com/node-b/gpu-9 on  quarantined") {
		t.Errorf("Events of a device whose node is not known: %s", body)
	}
	_, body = get(t, srv.URL+"/device?id=gpu.example.com/node-b/gpu-0")
	if !strings.Contains(body, "on node-b quarantined") {
		t.Errorf("Events of a device without a workflow are not its inventory node's: %s", body)
	}
	if code, body := get(t, srv.URL+"/device?id=not-a-device"); code != http.StatusBadRequest || !strings.Contains(body, "want ?id=driver/pool/device") {
		t.Fatalf("malformed id: %d %s", code, body)
	}
	if code, _ := get(t, srv.URL+"/nowhere"); code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", code)
	}
}

// Every link on the fleet page, and on a device page, answers 200 (the Temporal UI's are another
// server's and not followed).
func TestEveryLinkAnswers(t *testing.T) {
	srv, _ := testServer(t)
	href := regexp.MustCompile(`(?:href|src)="([^"]+)"`)
	for _, p := range []string{"/", "/device?id=gpu.example.com/node-a/gpu-1"} {
		_, body := get(t, srv.URL+p)
		for _, m := range href.FindAllStringSubmatch(body, -1) {
			link := strings.ReplaceAll(m[1], "&amp;", "&")
			if strings.HasPrefix(link, "http") || strings.HasPrefix(link, "data:") {
				continue
			}
			if code, _ := get(t, srv.URL+link); code != 200 {
				t.Errorf("%s links %s: %d", p, link, code)
			}
		}
	}
}

// However many people look at once, the fleet is read once per refresh.
func TestManyViewersReadTheFleetOnce(t *testing.T) {
	f := &fakeFleet{slow: 50 * time.Millisecond}
	c := &Cache{Fleet: f, Cluster: fakeCluster{}, Refresh: time.Hour}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); c.Snapshot(context.Background()) }()
	}
	wg.Wait()
	if n := f.lists.Load(); n != 1 {
		t.Fatalf("50 viewers read the fleet %d times", n)
	}
	c.Refresh = time.Nanosecond
	time.Sleep(time.Millisecond)
	c.Snapshot(context.Background())
	if n := f.lists.Load(); n != 2 {
		t.Fatalf("an old snapshot was not read again: %d reads", n)
	}
}
