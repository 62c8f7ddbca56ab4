package kubeobj

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
)

// CapacityCluster lists what a capacity what-if needs: nodes, slices, classes, claims and taint
// rules.
func CapacityCluster(ctx context.Context, cs kubernetes.Interface) (capacity.Cluster, error) {
	var c capacity.Cluster
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		c.Nodes = append(c.Nodes, &nodes.Items[i])
	}
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list resource slices: %w", err)
	}
	for i := range slices.Items {
		c.Slices = append(c.Slices, &slices.Items[i])
	}
	classes, err := cs.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list device classes: %w", err)
	}
	for i := range classes.Items {
		c.Classes = append(c.Classes, &classes.Items[i])
	}
	claims, err := cs.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list resource claims: %w", err)
	}
	for i := range claims.Items {
		c.Claims = append(c.Claims, &claims.Items[i])
	}
	rules, err := cs.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, fmt.Errorf("list device taint rules: %w", err)
	}
	for i := range rules.Items {
		c.TaintRules = append(c.TaintRules, &rules.Items[i])
	}
	return c, nil
}
