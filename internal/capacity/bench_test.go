package capacity

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fleet is nodes x devices shared GPUs (40Gi, 4Gi steps) and claims spread over them, each a 4-12Gi
// share of one GPU.
func fleet(nodes, devices, claims int) Cluster {
	c := Cluster{Classes: []*resourcev1.DeviceClass{gpuClass()}}
	for n := 0; n < nodes; n++ {
		name := fmt.Sprintf("node-%d", n)
		c.Nodes = append(c.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		s := sharedSlice(name, 0)
		for d := 0; d < devices; d++ {
			dev := sharedSlice(name, 1).Spec.Devices[0]
			dev.Name = fmt.Sprintf("gpu-%d", d)
			s.Spec.Devices = append(s.Spec.Devices, dev)
		}
		c.Slices = append(c.Slices, s)
	}
	for i := 0; i < claims; i++ {
		cl := claim(fmt.Sprintf("team-%d", i%20), fmt.Sprintf("claim-%d", i), "gpu",
			share{"gpu", fmt.Sprintf("gpu-%d", (i/nodes)%devices), fmt.Sprintf("00000000-0000-0000-0000-%012d", i), fmt.Sprintf("%dGi", 4+4*(i%3))})
		cl.Status.Allocation.Devices.Results[0].Pool = fmt.Sprintf("node-%d", i%nodes)
		c.Claims = append(c.Claims, cl)
	}
	return c
}

// BenchmarkCheckFleet: every invariant over 1,000 nodes x 8 shared GPUs and 10,000 claims.
func BenchmarkCheckFleet(b *testing.B) {
	c := fleet(1000, 8, 10000)
	b.ReportAllocs()
	for b.Loop() {
		if v := Check(Input{Slices: c.Slices, Claims: c.Claims}); len(v) != 0 {
			b.Fatalf("%d violations: %v", len(v), v[0])
		}
	}
}

// BenchmarkFitFleet: one what-if (an 8Gi share) asked of every one of the 1,000 nodes.
func BenchmarkFitFleet(b *testing.B) {
	c := fleet(1000, 8, 10000)
	claims := []*resourcev1.ResourceClaim{want("probe", "8Gi")}
	b.ReportAllocs()
	for b.Loop() {
		fits, err := Fit(context.Background(), c, claims, "", false)
		if err != nil || len(fits) != 1000 || !fits[0].Fits {
			b.Fatalf("%v %d", err, len(fits))
		}
	}
}
