package permits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
)

// A worker's permits leased ahead (see breaker.Lease). Its devices take from the batch in process,
// under the client's lock, so two devices never take one permit; only an empty or expired batch
// asks the breaker, and one request per budget is in flight at a time while the others wait for
// its batch. What was spent is reported to the breaker once a second; a revocation (a pause)
// takes back the rest at once.

// spendMargin keeps a worker from spending a permit in the last moment of its lease, so a clock
// a little ahead of the breaker's cannot spend one the breaker already stopped counting.
const spendMargin = time.Second

// New builds the breaker client of one worker process, which leases permits ahead
// under a name of its own and answers the breaker's revocations on its own task queue.
func New(c client.Client) *Client {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	return &Client{BreakerClient: api.BreakerClient{Client: c}, Worker: id, Queue: api.PermitQueue(id)}
}

// batch is the lease this worker spends from for one budget.
type batch struct {
	lease breaker.Lease
	left  int
	// until is the lease's end on this worker's clock: the lease's length counted from when the
	// request was sent, which is before the breaker's At, so a worker clock behind the
	// breaker's never spends after the breaker stopped counting the lease.
	until time.Time
}

// live says whether the batch may still be spent at now (not in its last spendMargin).
func (bt *batch) live(now time.Time) bool {
	return bt != nil && now.Before(bt.until.Add(-spendMargin))
}

// Unspent is how many permits of a budget this worker holds leased and not yet spent: if the
// process dies now, the breaker goes on counting them as used until their lease runs out.
func (b *Client) Unspent(budget string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt := b.batches[budget]; bt != nil {
		return bt.left
	}
	return 0
}

// takeLeased spends a permit of the request's budget from this worker's batch, if one is left.
// A device granted the same action here within the window is granted again at no cost, but only
// while the worker holds a live batch of that budget with permits left: such a batch was leased
// from a closed breaker and still counts there, so a pause revokes it. Without one (a spent batch
// the breaker has forgotten is never revoked) the repeat asks the breaker, which denies it while
// open. Callers hold b.mu.
func (b *Client) takeLeased(req breaker.PermitRequest, now time.Time) (breaker.PermitResult, bool) {
	bt := b.batches[breaker.BudgetOf(req.Action)]
	if !bt.live(now) || bt.left == 0 {
		return breaker.PermitResult{}, false
	}
	key := req.Key() + "|" + string(req.Action)
	if at, ok := b.granted[key]; ok && now.Sub(at) < req.Config.Window {
		return breaker.PermitResult{Granted: true, Reason: "already granted in this window"}, true
	}
	bt.left--
	b.spent = append(b.spent, spentPermit{lease: bt.lease.ID, grant: breaker.Grant{Device: req.Key(), Action: req.Action, At: now}})
	b.grantedHere(key, now, req.Config.Window)
	b.startFlush()
	return breaker.PermitResult{Granted: true}, true
}

// grantedHere remembers a grant for repeats within the window; old entries are dropped as it grows.
func (b *Client) grantedHere(key string, now time.Time, window time.Duration) {
	if b.granted == nil {
		b.granted = map[string]time.Time{}
	}
	if len(b.granted) > 10000 {
		for k, at := range b.granted {
			if now.Sub(at) >= window {
				delete(b.granted, k)
			}
		}
	}
	b.granted[key] = now
}

type spentPermit struct {
	lease int64
	grant breaker.Grant
}

// lease asks the breaker for the request's permit and a batch to keep. One request per budget is
// in flight: the others wait for it and then take from its batch.
func (b *Client) lease(ctx context.Context, req breaker.PermitRequest) (breaker.PermitResult, error) {
	for {
		b.mu.Lock()
		if res, ok := b.takeLeased(req, time.Now()); ok {
			b.mu.Unlock()
			return res, nil
		}
		bud := breaker.BudgetOf(req.Action)
		if wait, busy := b.asking[bud]; busy {
			b.mu.Unlock()
			select {
			case <-wait:
				if res, ok := b.refuseHere(req); ok {
					return res, nil
				}
				continue
			case <-ctx.Done():
				return breaker.PermitResult{}, ctx.Err()
			}
		}
		if b.asking == nil {
			b.asking = map[string]chan struct{}{}
		}
		done := make(chan struct{})
		b.asking[bud] = done
		b.retireBatch(bud)
		b.mu.Unlock()

		var res breaker.LeaseResult
		sent := time.Now()
		b.mu.Lock()
		ask := fmt.Sprintf("%s/%d", b.Worker, b.nextSeq())
		b.mu.Unlock()
		err := b.Update(ctx, api.UpdateLease, breaker.LeaseRequest{PermitRequest: req, Worker: b.Worker, Queue: b.Queue, Want: breaker.LeaseBatch, Ask: ask}, &res)
		b.mu.Lock()
		if err == nil {
			res.PermitResult = b.install(bud, req, res, sent)
			b.refused.Note(req, res.PermitResult, time.Now()) // before the waiters wake, so a refusal answers them
		} else {
			// The breaker may have made a lease whose answer never came: give back whatever this
			// request leased, or it counts as used for a whole window.
			b.returned = append(b.returned, breaker.LeaseReport{Worker: b.Worker, Ask: ask, Returned: breaker.LeaseBatch, Seq: b.nextSeq()})
			b.startFlush()
		}
		delete(b.asking, bud)
		close(done)
		b.mu.Unlock()
		if err != nil {
			return breaker.PermitResult{}, err
		}
		return res.PermitResult, nil
	}
}

// install keeps the breaker's answer to a lease request: the request's own permit, and the batch
// to spend from. An answer whose lease the breaker already revoked (a pause whose revocation
// reached this worker before the answer did) is refused whole: the batch goes back unspent, the
// device waits for a resume, and nothing of it is spent after the pause answered. Callers hold b.mu.
func (b *Client) install(bud string, req breaker.PermitRequest, res breaker.LeaseResult, sent time.Time) breaker.PermitResult {
	if res.Lease != nil && b.revokedLease(res.Lease.ID) {
		b.returned = append(b.returned, breaker.LeaseReport{Worker: b.Worker, Lease: res.Lease.ID, Returned: res.Lease.Count, Seq: b.nextSeq()})
		if req.Claim == "" && len(b.pending) < 100000 {
			b.pending = append(b.pending, req.Device.String())
		}
		b.startFlush()
		return breaker.PermitResult{Reason: "circuit breaker open: paused while this permit was on its way"}
	}
	if !res.Granted {
		return res.PermitResult
	}
	if res.Reason == "" {
		// From when the request was sent, before the breaker granted it: this worker's memory of
		// the grant never outlives the breaker's window.
		b.grantedHere(req.Key()+"|"+string(req.Action), sent, req.Config.Window)
	}
	if res.Lease != nil {
		if b.batches == nil {
			b.batches = map[string]*batch{}
		}
		b.batches[bud] = &batch{lease: *res.Lease, left: res.Lease.Count, until: sent.Add(res.Lease.Until.Sub(res.Lease.At))}
	}
	return res.PermitResult
}

// revokedLease says whether the breaker revoked lease id from this worker. Callers hold b.mu.
func (b *Client) revokedLease(id int64) bool {
	_, ok := b.revoked[id]
	return ok
}

// nextSeq numbers a report (breaker.LeaseReport.Seq). Callers hold b.mu.
func (b *Client) nextSeq() int64 {
	b.seq++
	return b.seq
}

// retireBatch returns what is left of a budget's batch before a new one is asked for.
// Callers hold b.mu.
func (b *Client) retireBatch(bud string) {
	bt := b.batches[bud]
	if bt == nil {
		return
	}
	delete(b.batches, bud)
	if bt.left > 0 {
		b.returned = append(b.returned, breaker.LeaseReport{Worker: b.Worker, Lease: bt.lease.ID, Returned: bt.left, Seq: b.nextSeq()})
		b.startFlush()
	}
}

// Revoke takes back the named leases at once (the breaker was paused): what was spent and not
// yet reported, and the count left unspent. Nothing of them is spent afterwards, a lease whose
// answer has not arrived yet included: its ID is kept until it could no longer be spent.
func (b *Client) Revoke(ids []int64) []breaker.LeaseReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.revoked == nil {
		b.revoked = map[int64]time.Time{}
	}
	for id, at := range b.revoked {
		if now.Sub(at) > breaker.LeaseFor+spendMargin {
			delete(b.revoked, id) // any lease it names has ended
		}
	}
	for _, id := range ids {
		b.revoked[id] = now
	}
	out := map[int64]*breaker.LeaseReport{}
	var order []int64
	report := func(id int64) *breaker.LeaseReport {
		if r, ok := out[id]; ok {
			return r
		}
		out[id] = &breaker.LeaseReport{Worker: b.Worker, Lease: id}
		order = append(order, id)
		return out[id]
	}
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	kept := b.spent[:0]
	for _, s := range b.spent {
		if want[s.lease] {
			r := report(s.lease)
			r.Spent = append(r.Spent, s.grant)
			continue
		}
		kept = append(kept, s)
	}
	b.spent = kept
	for bud, bt := range b.batches {
		if want[bt.lease.ID] {
			report(bt.lease.ID).Returned += bt.left
			delete(b.batches, bud)
		}
	}
	reports := make([]breaker.LeaseReport, 0, len(order))
	for _, id := range order {
		reports = append(reports, *out[id])
	}
	return reports
}

// reports takes what is waiting to be reported: spent permits by lease, and returned batches;
// a batch whose lease ran out is returned here too. Callers hold b.mu.
func (b *Client) reports(now time.Time) []breaker.LeaseReport {
	for bud, bt := range b.batches {
		if !bt.live(now) {
			b.retireBatch(bud)
		}
	}
	byLease := map[int64]int{}
	out := b.returned
	b.returned = nil
	for _, s := range b.spent {
		i, ok := byLease[s.lease]
		if !ok {
			i = len(out)
			byLease[s.lease] = i
			out = append(out, breaker.LeaseReport{Worker: b.Worker, Lease: s.lease, Seq: b.nextSeq()})
		}
		out[i].Spent = append(out[i].Spent, s.grant)
	}
	b.spent = nil
	return out
}

// Close returns this worker's unspent permits and reports the spent ones, as the worker stops.
func (b *Client) Close(ctx context.Context) error {
	b.mu.Lock()
	for bud := range b.batches {
		b.retireBatch(bud)
	}
	reps := b.reports(time.Now())
	b.mu.Unlock()
	if len(reps) == 0 {
		return nil
	}
	if err := b.Client.SignalWorkflow(ctx, api.BreakerWorkflowID, "", api.SignalPermitsReport, reps); err != nil {
		return fmt.Errorf("return leased permits: %w", err)
	}
	return nil
}
