package capacitycheck

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// NodeLeaseNamespace holds the nodes' heartbeat Leases.
const NodeLeaseNamespace = "kube-node-lease"

// NodeStates reads, per node, whether its heartbeat Lease has expired (a node without one, or
// gone, counts as lost) and whether an operator fenced it.
func NodeStates(ctx context.Context, kube kubernetes.Interface, now time.Time) (map[string]capacity.NodeState, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	leases, err := kube.CoordinationV1().Leases(NodeLeaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list node leases: %w", err)
	}
	byName := make(map[string]*coordinationv1.Lease, len(leases.Items))
	for i := range leases.Items {
		byName[leases.Items[i].Name] = &leases.Items[i]
	}
	out := make(map[string]capacity.NodeState, len(nodes.Items))
	for i := range nodes.Items {
		out[nodes.Items[i].Name] = StateOf(&nodes.Items[i], byName[nodes.Items[i].Name], now)
	}
	return out, nil
}

// StateOf is a node's hygiene state: lost when its Lease (nil: none) expired, fenced when an
// operator said so.
func StateOf(n *corev1.Node, l *coordinationv1.Lease, now time.Time) capacity.NodeState {
	_, fenced := n.Annotations[capacity.AnnotationFenced]
	return capacity.NodeState{Lost: l == nil || kubeobj.LeaseExpired(l, now), Fenced: fenced}
}

// unknownAllocations are the allocated claims on lost nodes no operator fenced: their devices'
// state is Unknown, and their capacity stays counted as used. A node deleted from the API is gone
// for good, as Kubernetes itself treats it (its Pods are deleted, their claims deallocated).
func unknownAllocations(claims []*resourcev1.ResourceClaim, nodes map[string]capacity.NodeState) []capacity.Finding {
	var out []capacity.Finding
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		node := capacity.AllocationNode(c.Status.Allocation)
		st, known := nodes[node]
		if node == "" || !known || !st.Lost || st.Fenced {
			continue
		}
		f := capacity.Finding{Kind: capacity.FindingNodeLost, Namespace: c.Namespace, Claim: c.Name, UID: string(c.UID), Version: c.ResourceVersion, Node: node,
			ShareIDs: capacity.ShareIDs(c.Status.Allocation),
			Reason:   fmt.Sprintf("node %s stopped renewing its Lease: Unknown until it returns or is fenced (capacity fence %s)", node, node)}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Claim < out[j].Namespace+"/"+out[j].Claim })
	return out
}

// FenceNode records an operator's confirmation on the node; a node that still renews its Lease
// cannot be fenced (what it holds is in use).
func FenceNode(ctx context.Context, kube kubernetes.Interface, in capacity.FenceInput) error {
	var value any
	if !in.Undo {
		states, err := NodeStates(ctx, kube, time.Now())
		if err != nil {
			return err
		}
		st, ok := states[in.Node]
		if !ok {
			return fmt.Errorf("node %s not found: a node deleted from the API is gone for good and needs no fence", in.Node)
		}
		if !st.Lost {
			return fmt.Errorf("node %s still renews its Lease: fencing it would let its devices be handed out twice", in.Node)
		}
		value = in.Actor + " " + time.Now().UTC().Format(time.RFC3339)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{capacity.AnnotationFenced: value}}})
	if _, err := kube.CoreV1().Nodes().Patch(ctx, in.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kubeobj.FieldManager}); err != nil {
		return fmt.Errorf("fence node %s: %w", in.Node, err)
	}
	return nil
}
