package clients

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func permitReq(n int) policy.PermitRequest {
	return policy.PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", n)}, Action: policy.Quarantined,
		Config: policy.BreakerConfig{Window: 10 * time.Minute, MaxCount: 20}}
}

// Devices take from a worker's batch under one lock: 64 asking at once get exactly the batch,
// a device granted here is granted again within the window at no cost, and nothing is taken in
// the lease's last second or after it.
func TestTakeLeasedIsAtomic(t *testing.T) {
	now := time.Now()
	b := &BreakerClient{Worker: "w", flushing: true}
	b.batches = map[string]*batch{"actions": {lease: policy.Lease{ID: 7, Until: now.Add(policy.LeaseFor)}, left: 8}}
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
	b.mu.Lock()
	res, ok := b.takeLeased(permitReq(n), now.Add(time.Minute))
	b.mu.Unlock()
	if !ok || !res.Granted || res.Reason == "" {
		t.Fatalf("a repeat within the window: %v %+v", ok, res)
	}
	b.batches["actions"] = &batch{lease: policy.Lease{ID: 8, Until: now.Add(time.Second / 2)}, left: 3}
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
	b := &BreakerClient{Worker: "w", flushing: true}
	b.batches = map[string]*batch{
		"actions":      {lease: policy.Lease{ID: 1, Until: now.Add(policy.LeaseFor)}, left: 3},
		"restrictions": {lease: policy.Lease{ID: 2, Action: policy.Restricted, Until: now.Add(policy.LeaseFor)}, left: 2},
	}
	b.spent = []spentPermit{{lease: 1, grant: policy.Grant{Device: "a"}}, {lease: 2, grant: policy.Grant{Device: "b"}}, {lease: 1, grant: policy.Grant{Device: "c"}}}
	reps := b.Revoke([]int64{1})
	if len(reps) != 1 || reps[0].Lease != 1 || reps[0].Worker != "w" || reps[0].Returned != 3 || len(reps[0].Spent) != 2 || reps[0].Spent[1].Device != "c" {
		t.Fatalf("revoked %+v", reps)
	}
	if _, ok := b.batches["actions"]; ok || b.batches["restrictions"].left != 2 || len(b.spent) != 1 || b.spent[0].grant.Device != "b" {
		t.Fatalf("left behind: %+v %+v", b.batches, b.spent)
	}
	// What is left is reported by lease, and a lease that ran out is returned with it.
	out := b.reports(now.Add(policy.LeaseFor))
	if len(out) != 2 || out[0].Lease != 2 || out[0].Returned != 2 || out[1].Lease != 2 || len(out[1].Spent) != 1 {
		t.Fatalf("reports %+v", out)
	}
	if len(b.batches) != 0 || len(b.spent) != 0 || len(b.reports(now)) != 0 {
		t.Fatal("reported twice")
	}
}

// The reporter stops once nothing is left to hand over: no refused device, no report, no batch.
func TestFlushStopsWhenNothingIsLeft(t *testing.T) {
	b := &BreakerClient{}
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
