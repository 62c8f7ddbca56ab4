package permits

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
)

func permitReq(n int) breaker.PermitRequest {
	return breaker.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", n)}, Action: decide.Quarantined,
		Config: breaker.Config{Window: 10 * time.Minute, MaxCount: 20}}
}

// Devices take from a worker's batch under one lock: 64 asking at once get exactly the batch,
// a device granted here is granted again within the window at no cost while the batch has
// permits left, and nothing is taken in the lease's last second or after it.
func TestTakeLeasedIsAtomic(t *testing.T) {
	now := time.Now()
	b := &Client{Worker: "w", flushing: true}
	b.batches = map[string]*batch{"actions": {lease: breaker.Lease{ID: 7}, until: now.Add(breaker.LeaseFor), left: 8}}
	var mu sync.Mutex
	granted := 0
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			b.mu.Lock()
			res, ok := b.takeLeased(permitReq(i), now)
			b.mu.Unlock()
			if ok && res.Granted {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != 8 || len(b.spent) != 8 || b.batches["actions"].left != 0 {
		t.Fatalf("granted %d, spent %d, left %d", granted, len(b.spent), b.batches["actions"].left)
	}
	first := b.spent[0].grant.Device
	var n int
	if _, err := fmt.Sscanf(first, "d/p/gpu-%d", &n); err != nil {
		t.Fatal(err)
	}
	// A repeat is answered here only while the batch has permits left (a pause would revoke it).
	b.mu.Lock()
	_, ok := b.takeLeased(permitReq(n), now.Add(time.Second))
	b.batches["actions"].left = 1
	res, again := b.takeLeased(permitReq(n), now.Add(time.Second))
	b.mu.Unlock()
	if ok || !again || !res.Granted || res.Reason == "" || b.batches["actions"].left != 1 {
		t.Fatalf("a repeat within the window: spent batch %v, batch with one left %v %+v", ok, again, res)
	}
	b.batches["actions"] = &batch{lease: breaker.Lease{ID: 8}, until: now.Add(time.Second / 2), left: 3}
	b.mu.Lock()
	_, ok = b.takeLeased(permitReq(100), now)
	b.mu.Unlock()
	if ok {
		t.Fatal("took a permit in its lease's last second")
	}
}

// A revocation gives back the named leases only: the spent permits not yet reported and the
// count left; the other leases and their reports stay.
func TestRevokeGivesBackNamedLeases(t *testing.T) {
	now := time.Now()
	b := &Client{Worker: "w", flushing: true}
	b.batches = map[string]*batch{
		"actions":      {lease: breaker.Lease{ID: 1}, until: now.Add(breaker.LeaseFor), left: 3},
		"restrictions": {lease: breaker.Lease{ID: 2, Action: decide.Restricted}, until: now.Add(breaker.LeaseFor), left: 2},
	}
	b.spent = []spentPermit{{lease: 1, grant: breaker.Grant{Device: "a"}}, {lease: 2, grant: breaker.Grant{Device: "b"}}, {lease: 1, grant: breaker.Grant{Device: "c"}}}
	reps := b.Revoke([]int64{1})
	if len(reps) != 1 || reps[0].Lease != 1 || reps[0].Worker != "w" || reps[0].Returned != 3 || len(reps[0].Spent) != 2 || reps[0].Spent[1].Device != "c" {
		t.Fatalf("revoked %+v", reps)
	}
	if _, ok := b.batches["actions"]; ok || b.batches["restrictions"].left != 2 || len(b.spent) != 1 || b.spent[0].grant.Device != "b" {
		t.Fatalf("left behind: %+v %+v", b.batches, b.spent)
	}
	// What is left is reported by lease, and a lease that ran out is returned with it.
	out := b.reports(now.Add(breaker.LeaseFor))
	if len(out) != 2 || out[0].Lease != 2 || out[0].Returned != 2 || out[1].Lease != 2 || len(out[1].Spent) != 1 {
		t.Fatalf("reports %+v", out)
	}
	if len(b.batches) != 0 || len(b.spent) != 0 || len(b.reports(now)) != 0 {
		t.Fatal("reported twice")
	}
}

// The reporter stops once nothing is left to hand over: no refused device, no report, no batch.
func TestFlushStopsWhenNothingIsLeft(t *testing.T) {
	b := &Client{}
	b.mu.Lock()
	b.startFlush()
	b.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		running := b.flushing
		b.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the reporter still runs with nothing to report")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A pause's revocation can reach a worker before the answer to the lease it revokes (the breaker
// records the lease and answers the pause in one workflow task). The late answer is refused
// whole: no batch is installed, the batch goes back unspent, and the device waits for a resume
// (#40, defect 1). Before, Revoke answered [] for the unknown lease and the answer installed a
// batch of 8 that the worker spent while the breaker was paused.
func TestLateLeaseAnswerAfterRevokeIsRefused(t *testing.T) {
	now := time.Now()
	b := &Client{Worker: "w", flushing: true}
	if reps := b.Revoke([]int64{5}); len(reps) != 0 {
		t.Fatalf("revoked a lease this worker does not hold yet: %+v", reps)
	}
	late := breaker.LeaseResult{PermitResult: breaker.PermitResult{Granted: true},
		Lease: &breaker.Lease{ID: 5, Worker: "w", Count: 8, At: now, Until: now.Add(breaker.LeaseFor)}}
	b.mu.Lock()
	res := b.install("actions", permitReq(1), late, now)
	b.mu.Unlock()
	if res.Granted || !strings.HasPrefix(res.Reason, "circuit breaker open") {
		t.Fatalf("the late answer was %+v", res)
	}
	if b.Unspent("actions") != 0 {
		t.Fatalf("a revoked lease was installed: %d unspent", b.Unspent("actions"))
	}
	b.mu.Lock()
	_, took := b.takeLeased(permitReq(2), now)
	reps := b.reports(now)
	b.mu.Unlock()
	if took {
		t.Fatal("a device spent from a revoked lease")
	}
	if len(reps) != 1 || reps[0].Lease != 5 || reps[0].Returned != 8 || reps[0].Seq == 0 {
		t.Fatalf("the revoked batch was not given back: %+v", reps)
	}
	if len(b.pending) != 1 || b.pending[0] != permitReq(1).Device.String() {
		t.Fatalf("the device does not wait for a resume: %v", b.pending)
	}
	// An answer for a lease that was not revoked is installed as before.
	b.mu.Lock()
	res = b.install("actions", permitReq(3), breaker.LeaseResult{PermitResult: breaker.PermitResult{Granted: true},
		Lease: &breaker.Lease{ID: 6, Worker: "w", Count: 8, At: now, Until: now.Add(breaker.LeaseFor)}}, now)
	b.mu.Unlock()
	if !res.Granted || b.Unspent("actions") != 8 {
		t.Fatalf("a fresh lease: %+v, %d unspent", res, b.Unspent("actions"))
	}
}

// A repeat of an action granted here is answered from memory only while a live batch of its
// budget is held (#40, defect 2): after a revocation, or once the batch ran out, the repeat asks
// the breaker, which denies it while paused or open. Before, the memory answered it whatever the
// breaker's state, and a second migration after a pause evicted.
func TestRepeatAfterRevokeAsksTheBreaker(t *testing.T) {
	now := time.Now()
	b := &Client{Worker: "w", flushing: true}
	b.batches = map[string]*batch{"actions": {lease: breaker.Lease{ID: 1}, until: now.Add(breaker.LeaseFor), left: 2}}
	b.mu.Lock()
	if res, ok := b.takeLeased(permitReq(1), now); !ok || !res.Granted || res.Reason != "" {
		t.Fatalf("first grant: %v %+v", ok, res)
	}
	if res, ok := b.takeLeased(permitReq(1), now); !ok || res.Reason == "" {
		t.Fatalf("a repeat with a live batch: %v %+v", ok, res)
	}
	b.mu.Unlock()
	b.Revoke([]int64{1})
	b.mu.Lock()
	_, ok := b.takeLeased(permitReq(1), now.Add(time.Second))
	b.mu.Unlock()
	if ok {
		t.Fatal("a repeat was granted from memory after the breaker revoked the batch")
	}
	// Nor once the batch can no longer be spent.
	b.batches = map[string]*batch{"actions": {lease: breaker.Lease{ID: 2}, until: now.Add(time.Second), left: 2}}
	b.mu.Lock()
	_, ok = b.takeLeased(permitReq(1), now.Add(time.Second))
	b.mu.Unlock()
	if ok {
		t.Fatal("a repeat was granted from memory with an expired batch")
	}
}

// A batch ends on the worker's own clock: the lease's length counted from when the request was
// sent. A worker whose clock runs 5 s behind the breaker's stops spending when the breaker stops
// counting, not 5 s after (#40: the clock check). Before, the worker compared its own clock with
// the breaker's Until.
func TestBatchEndsOnTheWorkersClock(t *testing.T) {
	breakerNow := time.Now()
	workerNow := breakerNow.Add(-5 * time.Second) // this worker's clock is 5 s behind
	b := &Client{Worker: "w", flushing: true}
	ans := breaker.LeaseResult{PermitResult: breaker.PermitResult{Granted: true},
		Lease: &breaker.Lease{ID: 1, Worker: "w", Count: 8, At: breakerNow, Until: breakerNow.Add(breaker.LeaseFor)}}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.install("actions", permitReq(0), ans, workerNow)
	// On the worker's clock, LeaseFor after sending is the breaker's Until.
	lastSpend := workerNow.Add(breaker.LeaseFor - spendMargin)
	if _, ok := b.takeLeased(permitReq(1), lastSpend.Add(-time.Millisecond)); !ok {
		t.Fatal("could not spend inside the lease")
	}
	if _, ok := b.takeLeased(permitReq(2), lastSpend); ok {
		t.Fatalf("spent at %s on the worker's clock, after the breaker's Until", lastSpend.Sub(workerNow))
	}
}

// A grant is remembered for exactly the window: a repeat at its edge asks the breaker, which has
// forgotten the grant by then.
func TestRepeatEndsWithTheWindow(t *testing.T) {
	now := time.Now()
	b := &Client{Worker: "w", flushing: true}
	b.batches = map[string]*batch{"actions": {lease: breaker.Lease{ID: 1}, until: now.Add(breaker.LeaseFor), left: 2}}
	req := permitReq(1)
	b.granted = map[string]time.Time{req.Key() + "|" + string(req.Action): now.Add(-req.Config.Window)}
	b.mu.Lock()
	res, ok := b.takeLeased(req, now)
	b.mu.Unlock()
	if !ok || res.Reason != "" || b.batches["actions"].left != 1 {
		t.Fatalf("at the window's edge: %v %+v, left %d: want a new permit spent, not a repeat", ok, res, b.batches["actions"].left)
	}
}

// A later revocation does not forget an earlier one: a pause, a resume and a second pause in a
// few seconds, with the first lease's answer still on its way, leave that answer refused.
func TestEarlierRevocationIsKept(t *testing.T) {
	now := time.Now()
	b := &Client{Worker: "w", flushing: true}
	b.Revoke([]int64{5})
	b.Revoke([]int64{6})
	late := breaker.LeaseResult{PermitResult: breaker.PermitResult{Granted: true},
		Lease: &breaker.Lease{ID: 5, Worker: "w", Count: 8, At: now, Until: now.Add(breaker.LeaseFor)}}
	b.mu.Lock()
	res := b.install("actions", permitReq(1), late, now)
	b.mu.Unlock()
	if res.Granted || b.Unspent("actions") != 0 {
		t.Fatalf("the first revoked lease was installed after a second revocation: %+v", res)
	}
}
