package remediation

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/escalation"
	"github.com/devicewarden/devicewarden/internal/notify"
)

// BreakerClient asks the fleet-wide circuit breaker for a permit. package api implements
// it with update-with-start on the breaker workflow.
type BreakerClient interface {
	Acquire(ctx context.Context, req breaker.PermitRequest) (breaker.PermitResult, error)
}

// PermitInput asks for permission to take one automatic action on a device (or, with Claim, on a
// ResourceClaim: "<namespace>/<name>/<uid>").
type PermitInput struct {
	Device device.ID    `json:"device"`
	Claim  string       `json:"claim,omitempty"`
	Action decide.State `json:"action"`
	// Woken: the breaker woke the device; ask it even if it was just seen open.
	Woken bool `json:"woken,omitempty"`
	// HeldAlert, when set, is the device's alert: if the action is held, the worker sends it with
	// the other held devices' (see heldAlerts) and the result says Alerted.
	HeldAlert *notify.AlertInput `json:"heldAlert,omitempty"`
	// Node, for a node step (breaker.Reboot): the permit is the node's, counted against its node
	// pool (read from the node's labels here). Hold: a node step's or a reset's permit is held
	// that long unless released first (0: the breaker's default).
	Node string        `json:"node,omitempty"`
	Hold time.Duration `json:"hold,omitempty"`
}

// ErrNodeGone is the non-retryable error type of a node step's permit asked for a node that no
// longer exists.
const ErrNodeGone = "NodeGone"

// PermitReleaser gives a node's permit back (package api's client does).
type PermitReleaser interface {
	Release(rel breaker.PermitRelease) error
}

// AcquirePermit asks the circuit breaker whether an automatic action may go ahead.
func (a *Activities) AcquirePermit(ctx context.Context, in PermitInput) (breaker.PermitResult, error) {
	known, err := (permitBook{a}).knownDevices(ctx)
	if err != nil {
		return breaker.PermitResult{}, err
	}
	req := breaker.PermitRequest{Device: in.Device, Claim: in.Claim, Action: in.Action, KnownDevices: known, Config: a.BreakerConfig, Woken: in.Woken, Hold: in.Hold}
	if in.Action == breaker.Reboot && in.Node != "" {
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// Not the breaker's fault, and no retry brings the node back: the step fails.
			return breaker.PermitResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s no longer exists: its node step cannot run", in.Node), ErrNodeGone, err)
		}
		if err != nil {
			return breaker.PermitResult{}, fmt.Errorf("node pool of %s: %w", in.Node, err)
		}
		req.Node, req.NodePool = in.Node, breaker.NodePool(node.Labels, a.NodePoolLabels)
	}
	res, err := a.Breaker.Acquire(ctx, req)
	if err != nil {
		return breaker.PermitResult{}, fmt.Errorf("acquire permit for %s: %w", breaker.PermitRequest{Device: in.Device, Claim: in.Claim}.Key(), err)
	}
	if a.Metrics != nil {
		result := "granted"
		if !res.Granted {
			result = "denied"
		}
		a.Metrics.Permits.WithLabelValues(result).Inc()
		if res.Tripped {
			a.Metrics.BreakerTrips.Inc()
		}
	}
	if !res.Granted && in.HeldAlert != nil {
		(alertHolder{a}).holdAlert(*in.HeldAlert, res.Reason)
		res.Alerted = true
	}
	return res, nil
}

// releaseNode gives back the node's permit the device holds, if it holds it (breaker.Release). A
// permit not given back lasts its hold; the node pool waits that long.
func (v permitBook) releaseNode(node string, id device.ID) {
	a := v.a
	r, ok := a.Breaker.(PermitReleaser)
	if !ok {
		return
	}
	rel := breaker.PermitRequest{Device: id, Action: breaker.Reboot, Node: node}
	if err := r.Release(breaker.PermitRelease{Key: rel.Key(), Holder: id.String()}); err != nil {
		slog.Default().Warn("node permit not given back; it lasts its hold", "node", node, "device", id.String(), "error", err)
	}
}

// resetEnded gives back the reset permit the device's step held, saying whether the reset ran and
// failed (the breaker stops resets after too many): a Busy step ran nothing, nor did one whose Pod
// never ran (NotRun), and an error is no verdict on the device.
func (v permitBook) resetEnded(id device.ID, res decide.StepResult, err error) {
	a := v.a
	r, ok := a.Breaker.(PermitReleaser)
	if !ok {
		return
	}
	rel := breaker.PermitRelease{Key: breaker.PermitRequest{Device: id, Action: breaker.Reset}.Key(), Holder: id.String()}
	if err == nil && !res.Busy && !res.NotRun && !res.Passed && res.Joined == "" {
		rel.Failed, rel.Reason = true, res.Reason
	}
	if err := r.Release(rel); err != nil {
		slog.Default().Warn("reset permit not given back; it lasts its hold", "device", id.String(), "error", err)
	}
}

// PermitRevoker takes back leased permits this worker holds (see breaker.Lease).
type PermitRevoker interface {
	Revoke(leases []int64) []breaker.LeaseReport
}

// RevokeInput names the leases the breaker takes back from one worker.
type RevokeInput struct {
	Leases []int64 `json:"leases"`
}

// RevokePermits gives back what this worker holds of the named leases: the breaker was paused.
// It runs on the worker's own task queue, so it reaches the one process that holds them.
func (a *Activities) RevokePermits(_ context.Context, in RevokeInput) ([]breaker.LeaseReport, error) {
	r, ok := a.Breaker.(PermitRevoker)
	if !ok {
		return nil, nil
	}
	return r.Revoke(in.Leases), nil
}

// deviceCount caches the number of devices published in ResourceSlices: the breaker's percentage
// cap needs the fleet size, and counting on every request would list every slice. Only the first
// request waits for the count; once it is older than ttl, the next request starts a recount in the
// background and goes on with the old one, so no device's permit waits for a list of the fleet.
type deviceCount struct {
	mu         sync.Mutex
	n          int
	at         time.Time
	ttl        time.Duration
	refreshing bool
}

func (v permitBook) knownDevices(ctx context.Context) (int, error) {
	a := v.a
	c := &a.devices
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ttl == 0 {
		c.ttl = 30 * time.Second
	}
	if c.at.IsZero() {
		n, err := v.countDevices(ctx)
		if err != nil {
			return 0, err
		}
		c.n, c.at = n, time.Now()
		return n, nil
	}
	if time.Since(c.at) >= c.ttl && !c.refreshing {
		c.refreshing = true
		go v.recountDevices()
	}
	return c.n, nil
}

// recountDevices refreshes the cached count; a failed count keeps the old one until the next try.
func (v permitBook) recountDevices() {
	a := v.a
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := v.countDevices(ctx)
	c := &a.devices
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil {
		slog.Default().Warn("devices not recounted; the breaker keeps the last count", "count", c.n, "error", err)
		return
	}
	c.n, c.at = n, time.Now()
}

func (v permitBook) countDevices(ctx context.Context) (int, error) {
	a := v.a
	slices, err := a.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, fmt.Errorf("count devices in resource slices: %w", err)
	}
	n := 0
	for _, s := range slices.Items {
		n += len(s.Spec.Devices)
	}
	return n, nil
}

// NodeReporter delivers device failures to a node's workflow (signal-with-start).
type NodeReporter interface {
	DeviceFailed(ctx context.Context, f escalation.NodeFailure) error
}

// ReportNodeFailure tells the device's node that the device was quarantined or restricted, so that
// enough failures on one node escalate to a node-level decision.
func (a *Activities) ReportNodeFailure(ctx context.Context, f escalation.NodeFailure) error {
	if a.Nodes == nil || f.Node == "" {
		return nil
	}
	if err := a.Nodes.DeviceFailed(ctx, f); err != nil {
		return fmt.Errorf("report failure of %s to node %s: %w", f.Device, f.Node, err)
	}
	return nil
}
