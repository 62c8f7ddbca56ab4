package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
	"github.com/devicewarden/devicewarden/internal/rolloutread"
)

// unlabelled records that the node had no ownership label (in kubeobj.AnnotationRolloutPrevious).
const unlabelled = "-"

// PhaseInput names one phase of a rollout plan.
type PhaseInput struct {
	Plan  rolloutplan.Plan `json:"plan"`
	Phase int              `json:"phase"`
}

// RolloutPreflight reads the phase's nodes and slices and lists what blocks the phase.
func (a *Activities) RolloutPreflight(ctx context.Context, in PhaseInput) (_ []rolloutplan.Violation, err error) {
	defer func() { err = permanent(err) }()
	if err := checkPhase(in.Plan, in.Phase, ErrInvalidRolloutInput); err != nil {
		return nil, err
	}
	snap, err := a.rolloutSnapshot(ctx, in.Plan, in.Phase, nil, false)
	if err != nil {
		return nil, err
	}
	return rolloutplan.Preflight(in.Plan, in.Phase, snap), nil
}

// EnableRolloutPhase switches the phase's nodes to DRA (the ownership label both drivers select
// on) and creates its DeviceClasses. It is idempotent: a node it already switched keeps the
// previous owner it recorded then.
func (a *Activities) EnableRolloutPhase(ctx context.Context, in PhaseInput) (_ rolloutplan.PhaseChange, err error) {
	defer func() { err = permanent(err) }()
	if err := checkPhase(in.Plan, in.Phase, ErrInvalidRolloutInput); err != nil {
		return rolloutplan.PhaseChange{}, err
	}
	ph := in.Plan.Phases[in.Phase]
	out := rolloutplan.PhaseChange{Phase: ph.Name, At: time.Now()}
	nodes, err := a.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ph.Nodes})
	if err != nil {
		return rolloutplan.PhaseChange{}, fmt.Errorf("list nodes %q: %w", ph.Nodes, err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ch, recorded := recordedChange(n, in.Plan.Name)
		if !recorded {
			ch.Previous, ch.HadLabel = n.Labels[in.Plan.OwnerLabel]
			if q, ok := n.Status.Allocatable[corev1.ResourceName(in.Plan.PluginResource)]; ok {
				ch.PluginDevices = q.Value()
			}
		}
		out.Nodes = append(out.Nodes, ch)
		if n.Labels[in.Plan.OwnerLabel] == in.Plan.DRA && n.Annotations[kubeobj.AnnotationRolloutPrevious] != "" {
			continue
		}
		if err := a.switchToDRA(ctx, in.Plan.Name, in.Plan.OwnerLabel, in.Plan.DRA, ch); err != nil {
			return rolloutplan.PhaseChange{}, err
		}
		a.nodeEvent(ctx, n, kubeobj.EventRolloutEnabled, fmt.Sprintf("rollout %s phase %s: %s=%s (was %s); the DRA driver owns its devices now",
			in.Plan.Name, ph.Name, in.Plan.OwnerLabel, in.Plan.DRA, previousOwner(ch)))
	}
	for _, c := range ph.Classes {
		created, err := kubeobj.EnsureDriverClass(ctx, a.Kube, c.Name, c.Driver)
		if err != nil {
			return rolloutplan.PhaseChange{}, err
		}
		if created {
			out.CreatedClasses = append(out.CreatedClasses, c.Name)
		}
	}
	return out, nil
}

// previousOwner is the ownership label's value a node had before a switch, as its annotation
// records it (unlabelled for none).
func previousOwner(ch rolloutplan.NodeChange) string {
	if !ch.HadLabel {
		return unlabelled
	}
	return ch.Previous
}

// switchToDRA labels the node for DRA and records, for the rollout, the owner and plugin devices
// it had before (what a retried enable and an undo read back).
func (a *Activities) switchToDRA(ctx context.Context, rolloutName, ownerLabel, dra string, ch rolloutplan.NodeChange) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]any{ownerLabel: dra},
		"annotations": map[string]any{kubeobj.AnnotationRolloutPrevious: rolloutName + "/" + previousOwner(ch),
			kubeobj.AnnotationRolloutDevices: strconv.FormatInt(ch.PluginDevices, 10)},
	}})
	if _, err := a.Kube.CoreV1().Nodes().Patch(ctx, ch.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kubeobj.FieldManager}); err != nil {
		return fmt.Errorf("switch node %s to %s: %w", ch.Node, dra, err)
	}
	return nil
}

// UndoRolloutPhase routes the phase's nodes back to their previous owner, except the nodes whose
// DRA devices still back an allocated claim (held, for drain). A claim's node is read from its
// allocation's own node selector, so a node whose slices are gone (a failed drift gate) still
// counts as held; an allocated claim of the phase's drivers whose node cannot be told holds every
// node of the phase. Once the nodes are routed back the claims are looked at again: a node a
// claim was allocated on meanwhile is switched back to DRA as enable left it, and held, so no
// node stays owned by both.
func (a *Activities) UndoRolloutPhase(ctx context.Context, in UndoInput) (_ UndoResult, err error) {
	defer func() { err = permanent(err) }()
	if in.Change.Partial && len(in.Change.Nodes) == 0 {
		if in.Change.Nodes, err = a.switchedNodes(ctx, in.Rollout, in.Selector); err != nil {
			return UndoResult{}, err
		}
	}
	bound, unplaced, err := a.boundClaimsByNode(ctx, in.Drivers)
	if err != nil {
		return UndoResult{}, err
	}
	var res UndoResult
	var routed []*corev1.Node
	var changes []rolloutplan.NodeChange
	for _, ch := range in.Change.Nodes {
		if n := bound[ch.Node] + unplaced; n > 0 {
			res.Held = append(res.Held, HeldNode{NodeChange: ch, Claims: n})
			continue
		}
		var label any = ch.Previous
		if !ch.HadLabel {
			label = nil
		}
		back, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"labels":      map[string]any{in.OwnerLabel: label},
			"annotations": map[string]any{kubeobj.AnnotationRolloutPrevious: nil, kubeobj.AnnotationRolloutDevices: nil},
		}})
		n, err := a.Kube.CoreV1().Nodes().Patch(ctx, ch.Node, types.MergePatchType, back, metav1.PatchOptions{FieldManager: kubeobj.FieldManager})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return UndoResult{}, fmt.Errorf("route node %s back: %w", ch.Node, err)
		}
		routed, changes = append(routed, n), append(changes, ch)
	}
	// Claims allocated on a routed node after the first list (DRA "" : an input from before this
	// look, routed as it was).
	after, unplacedAfter := map[string]int{}, 0
	if len(routed) > 0 && in.DRA != "" {
		if after, unplacedAfter, err = a.boundClaimsByNode(ctx, in.Drivers); err != nil {
			return UndoResult{}, err
		}
	}
	for i, ch := range changes {
		if held := after[ch.Node] + unplacedAfter; held > 0 {
			if err := a.switchToDRA(ctx, in.Rollout, in.OwnerLabel, in.DRA, ch); err != nil {
				return UndoResult{}, fmt.Errorf("keep node %s on DRA (a claim was allocated on it meanwhile): %w", ch.Node, err)
			}
			res.Held = append(res.Held, HeldNode{NodeChange: ch, Claims: held})
			continue
		}
		res.Returned = append(res.Returned, ch.Node)
		a.nodeEvent(ctx, routed[i], kubeobj.EventRolloutRolledBack, fmt.Sprintf("rollout %s phase %s rolled back (%s): %s=%s again",
			in.Rollout, in.Change.Phase, in.Reason, in.OwnerLabel, ch.Previous))
	}
	return res, nil
}

// boundClaimsByNode counts, per node, the allocated claims on the drivers' devices there, and the
// allocated claims of the drivers whose node it cannot tell. A claim's node is its allocation's
// node selector (metadata.name); only a claim without one is placed through the slices that
// publish its pool.
func (a *Activities) boundClaimsByNode(ctx context.Context, drivers []string) (map[string]int, int, error) {
	slices, err := a.driverSlices(ctx, drivers)
	if err != nil {
		return nil, 0, err
	}
	poolNode := map[string]string{}
	for _, sl := range slices {
		if sl.Spec.NodeName != nil {
			poolNode[sl.Spec.Driver+"/"+sl.Spec.Pool.Name] = *sl.Spec.NodeName
		}
	}
	claims, err := a.Kube.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("list resource claims: %w", err)
	}
	ours := map[string]bool{}
	for _, d := range drivers {
		ours[d] = true
	}
	out, unplaced := map[string]int{}, 0
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		nodes := map[string]bool{}
		mine := false
		for _, r := range c.Status.Allocation.Devices.Results {
			if !ours[r.Driver] {
				continue
			}
			mine = true
			if node, ok := poolNode[r.Driver+"/"+r.Pool]; ok {
				nodes[node] = true
			}
		}
		if !mine {
			continue
		}
		if sel := selectedNodes(c.Status.Allocation.NodeSelector); len(sel) > 0 {
			nodes = sel
		}
		if len(nodes) == 0 {
			unplaced++
		}
		for node := range nodes {
			out[node]++
		}
	}
	return out, unplaced, nil
}

// selectedNodes reads the node names an allocation's node selector names (metadata.name In ...,
// as the scheduler writes for node-local devices); nil when it names none.
func selectedNodes(sel *corev1.NodeSelector) map[string]bool {
	if sel == nil {
		return nil
	}
	var out map[string]bool
	for _, term := range sel.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			for _, v := range f.Values {
				if out == nil {
					out = map[string]bool{}
				}
				out[v] = true
			}
		}
	}
	return out
}

// driverSlices lists the ResourceSlices the drivers publish (rolloutread.DriverSlices).
func (a *Activities) driverSlices(ctx context.Context, drivers []string) ([]*resourcev1.ResourceSlice, error) {
	return rolloutread.DriverSlices(ctx, a.Kube, drivers)
}

// rolloutSnapshot reads what phase i's checks need (rolloutread.Snapshot).
func (a *Activities) rolloutSnapshot(ctx context.Context, p rolloutplan.Plan, i int, expected map[string]int64, withClaims bool) (rolloutplan.Snapshot, error) {
	return rolloutread.Snapshot(ctx, a.Kube, a.ownNamespace(), p, i, expected, withClaims)
}

// UndoInput is a phase change to undo.
type UndoInput struct {
	Rollout    string                  `json:"rollout"`
	OwnerLabel string                  `json:"ownerLabel"`
	Change     rolloutplan.PhaseChange `json:"change"`
	// Drivers are the phase's drivers, whose allocated devices hold a node back.
	Drivers []string `json:"drivers"`
	// DRA is the ownership label's DRA value: a node a claim was allocated on while it was being
	// routed back is put back on it ("": left as routed, as before this field).
	DRA    string `json:"dra,omitempty"`
	Reason string `json:"reason"`
	// Selector is the phase's node selector: a partial change's nodes are those of it that the
	// rollout's enable switched (their recorded previous owner says so).
	Selector string `json:"selector,omitempty"`
}

// UndoResult says which nodes went back to the plugin and which are held by bound claims.
type UndoResult struct {
	Returned []string   `json:"returned,omitempty"`
	Held     []HeldNode `json:"held,omitempty"`
}

// HeldNode is a node kept on DRA while claims are allocated on its devices.
type HeldNode struct {
	rolloutplan.NodeChange
	Claims int `json:"claims"`
}

// nodeEvent records an Event on a node; a failure to record is logged, never fatal.
func (a *Activities) nodeEvent(ctx context.Context, n *corev1.Node, reason, msg string) {
	ref := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
	name := fmt.Sprintf("%s.%x", n.Name, time.Now().UnixNano())
	if err := kubeobj.CreateEvent(ctx, a.Kube, ref, reason, corev1.EventTypeNormal, msg, name, "devicewarden.io/rollout"); err != nil {
		slog.Default().Warn("event not recorded", "node", n.Name, "reason", reason, "error", err)
	}
}
