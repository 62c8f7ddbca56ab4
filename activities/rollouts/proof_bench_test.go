package rollouts

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// BenchmarkProofTargets is the proof's look for its devices in a phase of 1,000 nodes of 8 shared
// GPUs each (4 node types, 3 driver versions: 12 groups), with 4,000 allocated claims: the lists it
// reads and the pick of one free device per group.
func BenchmarkProofTargets(b *testing.B) {
	var objs []runtime.Object
	for i := range 1000 {
		node := fmt.Sprintf("a-%d", i)
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
			Labels: map[string]string{"pool": "a", rolloutplan.DefaultProofNodeType: fmt.Sprintf("type-%d", i%4)}}})
		objs = append(objs, sharedSlice(node, fmt.Sprintf("1.%d.0", i%3), 8, true))
		for j := range 4 {
			c := allocatedClaim(node, fmt.Sprintf("gpu-%d", j))
			c.Name = fmt.Sprintf("busy-%d-%d", i, j)
			objs = append(objs, c)
		}
	}
	a := &Activities{Kube: fake.NewClientset(objs...)}
	p := proofPlan()
	b.ResetTimer()
	for b.Loop() {
		got, err := a.proofTargets(context.Background(), p, p.Phases[0])
		if err != nil || len(got) != 12 {
			b.Fatalf("%d targets, %v", len(got), err)
		}
	}
}
