package breaker

import (
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

// A node step's permit is its node's: the devices of one node share it, at most MaxReboots nodes
// of one node pool hold one at a time (other pools are not counted), it lasts until its holder
// releases it or its hold ends rather than for the window, and another device's release gives
// back nothing.
func TestNodePermitsPerNodePoolAtATime(t *testing.T) {
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxReboots: 1}
	dev := func(node, gpu string) device.ID { return device.ID{Driver: "d", Pool: node, Device: gpu} }
	ask := func(node, gpu, pool string, at time.Time) PermitResult {
		return b.Acquire(PermitRequest{Device: dev(node, gpu), Action: Reboot, Node: node, NodePool: pool, Hold: time.Hour, Config: cfg}, at)
	}
	if r := ask("n1", "gpu-0", "a", t0); !r.Granted {
		t.Fatalf("first node of pool a: %s", r.Reason)
	}
	if r := ask("n1", "gpu-1", "a", t0); !r.Granted || !strings.Contains(r.Reason, "already granted") {
		t.Fatalf("a second device of the same node does not share its permit: %+v", r)
	}
	denied := b.Denied
	r := ask("n2", "gpu-0", "a", t0)
	if r.Granted || r.Tripped || b.Open || !strings.Contains(r.Reason, "1 of node pool a being rebooted (n1; max 1 at a time)") || b.Denied != denied+1 {
		t.Fatalf("a second node of pool a: %+v, %d refused", r, b.Denied)
	}
	if r := ask("n3", "gpu-0", "b", t0); !r.Granted {
		t.Fatalf("pool b counted pool a's node: %s", r.Reason)
	}
	// Past the window, the permit is still held: a node step may outlast the window.
	if r := ask("n2", "gpu-0", "a", t0.Add(20*time.Minute)); r.Granted {
		t.Fatal("pool a's permit ended with the window, not with the step")
	}
	if b.Release(PermitRelease{Key: "node:n1", Holder: dev("n1", "gpu-1").String()}) {
		t.Fatal("a device that shared the permit released it")
	}
	if !b.Release(PermitRelease{Key: "node:n1", Holder: dev("n1", "gpu-0").String()}) {
		t.Fatal("the holder could not release its permit")
	}
	if r := ask("n2", "gpu-0", "a", t0.Add(20*time.Minute)); !r.Granted {
		t.Fatalf("pool a after the release: %s", r.Reason)
	}
	// A holder that never releases (its worker died) frees its pool at the end of its hold.
	if r := ask("n4", "gpu-0", "b", t0.Add(50*time.Minute)); r.Granted {
		t.Fatal("pool b granted a second node while n3 held its permit")
	}
	if r := ask("n4", "gpu-0", "b", t0.Add(61*time.Minute)); !r.Granted {
		t.Fatalf("pool b after n3's hold ended: %s", r.Reason)
	}
	b.Open, b.Reason = true, "paused by hand"
	if r := ask("n5", "gpu-0", "c", t0.Add(61*time.Minute)); r.Granted {
		t.Fatal("an open breaker granted a node step")
	}
}

// A request without a hold holds for DefaultNodeHold; a request without a node keeps the old
// meaning (a device's grant in the window), so a breaker run recorded before replays as it did.
func TestNodePermitDefaultsAndOldRequests(t *testing.T) {
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxReboots: 1}
	id := device.ID{Driver: "d", Pool: "n1", Device: "gpu-0"}
	if r := b.Acquire(PermitRequest{Device: id, Action: Reboot, Node: "n1", Config: cfg}, t0); !r.Granted || b.Grants[0].Until != t0.Add(DefaultNodeHold) || b.Grants[0].Pool != "" {
		t.Fatalf("%+v %+v", r, b.Grants)
	}
	b = &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true}
	if r := b.Acquire(PermitRequest{Device: id, Action: Reboot, Config: cfg}, t0); !r.Granted || b.Grants[0].Device != id.String() || !b.Grants[0].Until.IsZero() {
		t.Fatalf("old request: %+v %+v", r, b.Grants)
	}
	if r := b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "n2", Device: "gpu-0"}, Action: Reboot, Config: cfg}, t0.Add(11*time.Minute)); !r.Granted {
		t.Fatalf("an old request's grant outlived the window: %s", r.Reason)
	}
}

// A node pool is named by the first configured label a node carries; the defaults know the common
// provisioners', and a node without any is in the pool "".
func TestNodePoolFromLabels(t *testing.T) {
	if p := NodePool(map[string]string{"karpenter.sh/nodepool": "h100", "devicewarden.io/node-pool": "train"}, nil); p != "train" {
		t.Fatalf("default labels: %q", p)
	}
	if p := NodePool(map[string]string{"cloud.google.com/gke-nodepool": "a3"}, nil); p != "a3" {
		t.Fatalf("gke: %q", p)
	}
	if p := NodePool(map[string]string{"rack": "r7", "karpenter.sh/nodepool": "h100"}, []string{"rack"}); p != "r7" {
		t.Fatalf("configured label: %q", p)
	}
	if p := NodePool(map[string]string{"kubernetes.io/hostname": "n1"}, nil); p != "" {
		t.Fatalf("no pool label: %q", p)
	}
}

// A worker that saw a node pool refused keeps asking for other pools' nodes: the refusal of one
// pool says nothing of another.
func TestRefusalsDoNotAnswerNodeSteps(t *testing.T) {
	var r Refusals
	req := PermitRequest{Device: device.ID{Driver: "d", Pool: "n1", Device: "gpu-0"}, Action: Reboot, Node: "n1", NodePool: "a"}
	r.Note(req, PermitResult{Reason: "reboot budget spent"}, t0)
	req.Node, req.NodePool = "n9", "b"
	if _, ok := r.Answer(req, t0); ok {
		t.Fatal("a node step of pool b was refused for pool a's")
	}
	if _, ok := r.Answer(PermitRequest{Action: decide.Quarantined}, t0); ok {
		t.Fatal("a refused node step held quarantines")
	}
}

// A resume starts a fresh window, but a node being rebooted still holds its pool's permit.
func TestResumeKeepsNodePermits(t *testing.T) {
	b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true}
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxReboots: 1}
	ask := func(node string) PermitResult {
		return b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: node, Device: "gpu-0"}, Action: Reboot, Node: node, NodePool: "a", Hold: time.Hour, Config: cfg}, t0)
	}
	if r := ask("n1"); !r.Granted {
		t.Fatal(r.Reason)
	}
	b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: "n9", Device: "gpu-0"}, Action: decide.Quarantined, Config: cfg}, t0)
	b.Trip("ops", "look", t0)
	b.Resume("ops", t0)
	if len(b.Grants) != 1 || b.Grants[0].Device != "node:n1" {
		t.Fatalf("grants after a resume: %+v", b.Grants)
	}
	if r := ask("n2"); r.Granted {
		t.Fatal("a resume let a second node of the pool reboot")
	}
}

// A node step that asks again for the permit it holds (holders: move asks every 15 s) renews the
// hold from now, so a reboot that starts late in the first hold still has its whole hold, and no
// second node of the pool is granted mid-reboot (#52, defect 1). A shorter request never shortens
// it; a run before the change keeps the first expiry.
func TestRenewedNodePermitCoversItsStep(t *testing.T) {
	for _, renews := range []bool{true, false} {
		b := &State{SeparateBudgets: true, OpenDeniesAll: true, SpendsOwnAction: true, RenewsHolds: renews}
		cfg := Config{Window: 10 * time.Minute, MaxCount: 20, MaxReboots: 1}
		ask := func(node string, hold time.Duration, at time.Time) PermitResult {
			return b.Acquire(PermitRequest{Device: device.ID{Driver: "d", Pool: node, Device: "gpu-0"}, Action: Reboot, Node: node, NodePool: "a", Hold: hold, Config: cfg}, at)
		}
		if r := ask("n1", 10*time.Minute, t0); !r.Granted {
			t.Fatal(r.Reason)
		}
		// Holders moved for 9 minutes; the reboot starts with the renewal at 9 min.
		if r := ask("n1", 10*time.Minute, t0.Add(9*time.Minute)); !r.Granted {
			t.Fatal(r.Reason)
		}
		if r := ask("n1", time.Minute, t0.Add(9*time.Minute+30*time.Second)); !r.Granted {
			t.Fatal(r.Reason)
		}
		// 12 minutes in, n1 is mid-reboot: n2 of the same pool must wait.
		r := ask("n2", 10*time.Minute, t0.Add(12*time.Minute))
		if renews && r.Granted {
			t.Fatal("a second node of the pool was granted while the first rebooted on a renewed hold")
		}
		if !renews && !r.Granted {
			t.Fatalf("a run before the change renewed the hold: %s", r.Reason)
		}
		if renews {
			if r := ask("n2", 10*time.Minute, t0.Add(19*time.Minute+time.Second)); !r.Granted {
				t.Fatalf("after the renewed hold: %s", r.Reason)
			}
		}
	}
}

// A reset always asks the breaker: one refused for the budget waits in its list, to be woken when
// a reset ends, which a worker's memory of the refusal would keep it from.
func TestRefusalsDoNotAnswerResets(t *testing.T) {
	var r Refusals
	req := PermitRequest{Device: device.ID{Driver: "d", Pool: "n1", Device: "gpu-0"}, Action: Reset}
	r.Note(req, PermitResult{Reason: "reset budget spent"}, t0)
	if _, ok := r.Answer(req, t0); ok {
		t.Fatal("a reset was refused from memory")
	}
}
