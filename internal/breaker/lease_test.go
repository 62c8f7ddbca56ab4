package breaker

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

func leaseReq(worker, dev string, action decide.State, cfg Config) LeaseRequest {
	return LeaseRequest{PermitRequest: PermitRequest{Device: device.ID{Driver: "d", Pool: "p", Device: dev}, Action: action, Config: cfg},
		Worker: worker, Queue: "q-" + worker, Want: LeaseBatch}
}

func TestLeaseGrantsHalfOfWhatIsFree(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20}
	b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	res := b.Lease(leaseReq("w1", "gpu-0", decide.Quarantined, cfg), t0)
	if !res.Granted || res.Lease == nil || res.Lease.Count != 8 || res.Lease.Until != t0.Add(LeaseFor) {
		t.Fatalf("first lease = %+v %+v", res, res.Lease)
	}
	if got := b.used("actions"); got != 9 {
		t.Fatalf("used = %d, want 9 (1 granted + 8 leased)", got)
	}
	res = b.Lease(leaseReq("w2", "gpu-1", decide.Quarantined, cfg), t0)
	if res.Lease == nil || res.Lease.Count != 5 { // 20 - 10 = 10 free, half of it
		t.Fatalf("second lease = %+v", res.Lease)
	}
	b.Report(LeaseReport{Worker: "w1", Lease: 1, Spent: []Grant{{Device: "d/p/gpu-7", At: t0.Add(time.Second)}}, Returned: 3}, t0.Add(2*time.Second))
	if len(b.Leases) != 2 || b.Leases[0].Count != 4 || b.used("actions") != 12 {
		t.Fatalf("after a report: leases %+v, used %d", b.Leases, b.used("actions"))
	}
	g := b.Grants[len(b.Grants)-1]
	if g.Device != "d/p/gpu-7" || g.Action != decide.Quarantined || !g.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("spent permit became %+v", g)
	}
	// A report from another worker, of a lease it does not hold, changes nothing.
	b.Report(LeaseReport{Worker: "w2", Lease: 1, Returned: 4}, t0.Add(2*time.Second))
	if b.Leases[0].Count != 4 {
		t.Fatalf("another worker returned w1's permits: %+v", b.Leases[0])
	}
	// More reported than the lease holds counts no further, and the empty lease is forgotten.
	b.Report(LeaseReport{Worker: "w1", Lease: 1, Returned: 40}, t0.Add(2*time.Second))
	if len(b.Leases) != 1 || b.Leases[0].ID != 2 || b.used("actions") != 8 {
		t.Fatalf("after returning the rest: %+v, used %d", b.Leases, b.used("actions"))
	}
	// A spent permit stamped outside the lease is counted from now.
	b.Report(LeaseReport{Worker: "w2", Lease: 2, Spent: []Grant{{Device: "d/p/gpu-8", At: t0.Add(-time.Hour)}}}, t0.Add(3*time.Second))
	if g := b.Grants[len(b.Grants)-1]; !g.At.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("a spend before its lease counted at %s", g.At)
	}
	// Restrictions lease from their own budget.
	res = b.Lease(leaseReq("w1", "gpu-2", decide.Restricted, cfg), t0)
	if res.Lease == nil || res.Lease.Count != 8 || b.used("restrictions") != 9 || b.used("actions") != 8 {
		t.Fatalf("restriction lease %+v: used %d / %d", res.Lease, b.used("restrictions"), b.used("actions"))
	}
}

func TestLeasesCountTowardTheCap(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 4}
	b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r1 := b.Lease(leaseReq("w1", "gpu-0", decide.Quarantined, cfg), t0) // 1 + half of 3
	r2 := b.Lease(leaseReq("w2", "gpu-1", decide.Quarantined, cfg), t0) // 1, 0 leased (1 free)
	r3 := b.Lease(leaseReq("w3", "gpu-2", decide.Quarantined, cfg), t0) // the last one
	if r1.Lease == nil || r1.Lease.Count != 1 || r2.Lease != nil || !r3.Granted || r3.Lease != nil {
		t.Fatalf("leases: %+v / %+v / %+v", r1.Lease, r2, r3)
	}
	r4 := b.Lease(leaseReq("w3", "gpu-3", decide.Quarantined, cfg), t0)
	if r4.Granted || !r4.Tripped || !b.Open {
		t.Fatalf("over the cap: %+v", r4)
	}
	// The lease of a worker that never reports counts for a window after it could be spent.
	b.Resume("op", t0.Add(time.Minute))
	if b.used("actions") != 1 {
		t.Fatalf("a resume forgot the lease: used %d", b.used("actions"))
	}
	b.prune(t0.Add(LeaseFor + cfg.Window - time.Second))
	if b.used("actions") != 1 {
		t.Fatal("the lease left the window before its last possible spend did")
	}
	b.prune(t0.Add(LeaseFor + cfg.Window + time.Second))
	if b.used("actions") != 0 || len(b.Leases) != 0 {
		t.Fatalf("an expired lease still counts: %+v", b.Leases)
	}
}

func TestLeaseOnlyWithAFreshGrant(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20}
	b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b.Lease(leaseReq("w1", "gpu-0", decide.Quarantined, cfg), t0)
	if r := b.Lease(leaseReq("w1", "gpu-0", decide.Quarantined, cfg), t0); !r.Granted || r.Lease != nil {
		t.Fatalf("a repeat leased %+v", r)
	}
	claim := leaseReq("w1", "", ClaimDeleted, cfg)
	claim.Device, claim.Claim = device.ID{}, "ns/c/u"
	if r := b.Lease(claim, t0); !r.Granted || r.Lease != nil {
		t.Fatalf("a claim leased %+v", r)
	}
	none := leaseReq("w1", "gpu-1", decide.Quarantined, cfg)
	none.Want = 0
	if r := b.Lease(none, t0); !r.Granted || r.Lease != nil {
		t.Fatalf("a request for no batch leased %+v", r)
	}
	b.Trip("op", "test", t0)
	if r := b.Lease(leaseReq("w1", "gpu-2", decide.Quarantined, cfg), t0); r.Granted || r.Lease != nil {
		t.Fatalf("a paused breaker leased %+v", r)
	}
}

func TestOutstandingAndUnreachable(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 100}
	b := &State{Config: cfg, SeparateBudgets: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b.Lease(leaseReq("w1", "gpu-0", decide.Quarantined, cfg), t0)
	b.Lease(leaseReq("w2", "gpu-1", decide.Quarantined, cfg), t0.Add(time.Second))
	b.Lease(leaseReq("w1", "gpu-2", decide.Restricted, cfg), t0.Add(2*time.Second))
	queues, ids := b.Outstanding(t0.Add(3 * time.Second))
	if fmt.Sprint(queues) != "[q-w1 q-w2]" || fmt.Sprint(ids["q-w1"]) != "[1 3]" || fmt.Sprint(ids["q-w2"]) != "[2]" {
		t.Fatalf("outstanding %v %v", queues, ids)
	}
	if q, _ := b.Outstanding(t0.Add(LeaseFor + 2*time.Second)); len(q) != 0 {
		t.Fatalf("leases that ran out are still revoked: %v", q)
	}
	if !b.SpendableUntil(t0).IsZero() {
		t.Fatal("reachable leases held the breaker")
	}
	b.Unreachable([]int64{2, 3})
	if got := b.SpendableUntil(t0.Add(3 * time.Second)); !got.Equal(t0.Add(2*time.Second + LeaseFor)) {
		t.Fatalf("spendable until %s", got)
	}
	if q, _ := b.Outstanding(t0.Add(3 * time.Second)); fmt.Sprint(q) != "[q-w1]" {
		t.Fatalf("unreachable leases revoked again: %v", q)
	}
	if !b.SpendableUntil(t0.Add(time.Hour)).IsZero() {
		t.Fatal("leases that ran out still hold the breaker")
	}
}

func TestLeasesNeverExceedTheCap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := Config{Window: 10 * time.Minute, MaxCount: rapid.IntRange(1, 30).Draw(rt, "cap")}
		b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true}
		type held struct {
			lease Lease
			left  int
			spent []Grant
		}
		workers := make([][]*held, 3)
		dead := make([]bool, 3)
		var acted []time.Time // since the last resume
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		dev := 0
		act := func() {
			acted = append(acted, now)
			n := 0
			for _, at := range acted {
				if at.After(now.Add(-cfg.Window)) {
					n++
				}
			}
			if n > cfg.MaxCount {
				rt.Fatalf("%d devices acted within %s, cap %d", n, cfg.Window, cfg.MaxCount)
			}
		}
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for i := range steps {
			w := rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("w%d", i))
			switch rapid.SampledFrom([]string{"ask", "ask", "spend", "spend", "spend", "report", "return", "die", "wait", "resume"}).Draw(rt, fmt.Sprintf("k%d", i)) {
			case "ask":
				if dead[w] {
					continue
				}
				dev++
				res := b.Lease(leaseReq(fmt.Sprint(w), fmt.Sprintf("gpu-%d", dev), decide.Quarantined, cfg), now)
				if res.Granted {
					act()
				}
				if res.Lease != nil {
					workers[w] = append(workers[w], &held{lease: *res.Lease, left: res.Lease.Count})
				}
			case "spend":
				for _, h := range workers[w] {
					if !dead[w] && h.left > 0 && now.Before(h.lease.Until) {
						dev++
						h.left--
						h.spent = append(h.spent, Grant{Device: fmt.Sprintf("d/p/gpu-%d", dev), At: now})
						act()
						break
					}
				}
			case "report", "return":
				if dead[w] {
					continue
				}
				for _, h := range workers[w] {
					r := LeaseReport{Worker: fmt.Sprint(w), Lease: h.lease.ID, Spent: h.spent}
					h.spent = nil
					if !now.Before(h.lease.Until) || rapid.Bool().Draw(rt, fmt.Sprintf("ret%d", i)) {
						r.Returned, h.left = h.left, 0
					}
					b.Report(r, now)
				}
			case "die":
				dead[w] = true
			case "wait":
				now = now.Add(rapid.SampledFrom([]time.Duration{time.Second, 5 * time.Second, time.Minute, 10 * time.Minute}).Draw(rt, fmt.Sprintf("gap%d", i)))
			case "resume":
				b.Resume("op", now)
				// Leases carry over into the fresh window: their spends count as new actions.
				acted = nil
			}
		}
	})
}

func TestSpentPermitKeepsItsOwnAction(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20}
	b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true, SpendsOwnAction: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	res := b.Lease(leaseReq("w1", "gpu-0", migrationplan.ActionMigrate, cfg), t0)
	if res.Lease == nil {
		t.Fatalf("no lease: %+v", res)
	}
	b.Report(LeaseReport{Worker: "w1", Lease: res.Lease.ID, Seq: 1,
		Spent: []Grant{{Device: "d/p/gpu-1", Action: decide.Quarantined, At: t0}}}, t0)
	if g := b.Grants[len(b.Grants)-1]; g.Device != "d/p/gpu-1" || g.Action != decide.Quarantined {
		t.Fatalf("spent on a quarantine, recorded as %+v", g)
	}
	used := b.used("actions")
	mig := b.Acquire(leaseReq("w1", "gpu-1", migrationplan.ActionMigrate, cfg).PermitRequest, t0)
	if !mig.Granted || mig.Reason != "" || b.used("actions") != used+1 {
		t.Fatalf("gpu-1's migration after its quarantine: %+v, used %d -> %d", mig, used, b.used("actions"))
	}
	// A spend of another budget is never recorded as that budget: it stays the lease's.
	b.Report(LeaseReport{Worker: "w1", Lease: res.Lease.ID, Seq: 2,
		Spent: []Grant{{Device: "d/p/gpu-2", Action: decide.Restricted, At: t0}}}, t0)
	if g := b.Grants[len(b.Grants)-1]; g.Action != migrationplan.ActionMigrate {
		t.Fatalf("a restriction spent from an actions batch recorded as %+v", g)
	}
	// A run recorded before the change keeps recording under the lease's action.
	old := &State{Config: cfg, SeparateBudgets: true}
	res = old.Lease(leaseReq("w1", "gpu-0", migrationplan.ActionMigrate, cfg), t0)
	old.Report(LeaseReport{Worker: "w1", Lease: res.Lease.ID, Spent: []Grant{{Device: "d/p/gpu-1", Action: decide.Quarantined, At: t0}}}, t0)
	if g := old.Grants[len(old.Grants)-1]; g.Action != migrationplan.ActionMigrate {
		t.Fatalf("an old run recorded %+v", g)
	}
}

func TestReportSentAgainCountsOnce(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20}
	b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true, SpendsOwnAction: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	res := b.Lease(leaseReq("w1", "gpu-0", decide.Quarantined, cfg), t0)
	id := res.Lease.ID
	first := LeaseReport{Worker: "w1", Lease: id, Seq: 1, Spent: []Grant{
		{Device: "d/p/gpu-1", Action: decide.Quarantined, At: t0}, {Device: "d/p/gpu-2", Action: decide.Quarantined, At: t0},
		{Device: "d/p/gpu-3", Action: decide.Quarantined, At: t0}, {Device: "d/p/gpu-4", Action: decide.Quarantined, At: t0}}}
	b.Report(first, t0)
	b.Report(first, t0) // the resend
	later := LeaseReport{Worker: "w1", Lease: id, Seq: 2, Spent: []Grant{
		{Device: "d/p/gpu-5", Action: decide.Quarantined, At: t0}, {Device: "d/p/gpu-6", Action: decide.Quarantined, At: t0}}}
	b.Report(later, t0)
	devices := map[string]int{}
	for _, g := range b.Grants {
		devices[g.Device]++
	}
	for _, d := range []string{"d/p/gpu-1", "d/p/gpu-4", "d/p/gpu-5", "d/p/gpu-6"} {
		if devices[d] != 1 {
			t.Fatalf("%s recorded %d times: %+v", d, devices[d], b.Grants)
		}
	}
	if len(b.Leases) != 1 || b.Leases[0].Count != 2 {
		t.Fatalf("lease left %+v, want 2 unspent", b.Leases)
	}
}

func TestLeaseGivenBackByItsRequest(t *testing.T) {
	cfg := Config{Window: 10 * time.Minute, MaxCount: 20}
	b := &State{Config: cfg, SeparateBudgets: true, WakeWaiting: true, OpenDeniesAll: true, SpendsOwnAction: true}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	req := leaseReq("w1", "gpu-0", decide.Quarantined, cfg)
	req.Ask = "w1/7"
	if res := b.Lease(req, t0); res.Lease == nil || res.Lease.Count != 8 {
		t.Fatalf("lease %+v", res)
	}
	b.Report(LeaseReport{Worker: "w2", Ask: "w1/7", Returned: LeaseBatch, Seq: 1}, t0) // another worker's tag
	b.Report(LeaseReport{Worker: "w1", Ask: "w1/6", Returned: LeaseBatch, Seq: 2}, t0) // another request
	if b.used("actions") != 9 {
		t.Fatalf("used %d after reports that name another lease, want 9", b.used("actions"))
	}
	b.Report(LeaseReport{Worker: "w1", Ask: "w1/7", Returned: LeaseBatch, Seq: 3}, t0)
	if len(b.Leases) != 0 || b.used("actions") != 1 {
		t.Fatalf("after the give-back: leases %+v, used %d, want only the request's own grant", b.Leases, b.used("actions"))
	}
}
