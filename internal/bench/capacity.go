package bench

import (
	"context"
	"fmt"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/capacity"
	"github.com/devicewarden/devicewarden/internal/capacitycheck"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// hygieneScans times the claim-hygiene scan twice: as on a healthy fleet (no allocation old
// enough to be a finding: one list of claims) and with every allocated claim a candidate (also
// nodes, their Leases and the Pending Pods, and every claim classified).
func hygieneScans(ctx context.Context, scan capacity.Scan, o RolloutOptions) error {
	for _, c := range []struct {
		name string
		pol  capacity.HygienePolicy
	}{
		{"healthy: no candidate", capacity.HygienePolicy{LeakTimeout: time.Hour, StuckTimeout: time.Hour}},
		{"every claim a candidate", capacity.HygienePolicy{}},
	} {
		var findings []capacity.Finding
		st, err := timeRuns(o.Runs, func() (err error) {
			findings, err = scan(ctx, c.pol, time.Now())
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "claim hygiene scan, %s (%s; %d findings\n", c.name, st, len(findings))
	}
	return nil
}

// Capacity loads the rollout benchmark's fleet (nodes x shared GPUs, allocated claims) into a
// fresh apiserver and times the capacity check (list + check) and one what-if over every node
// (list + the scheduler's allocator per node).
func Capacity(ctx context.Context, o RolloutOptions) error {
	return withFleet(ctx, o, func(kube kubernetes.Interface, _ time.Time) error {
		if err := sim.EnsureDeviceClass(ctx, kube); err != nil {
			return err
		}
		probe := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "what-if", Namespace: "tenant-0", UID: "what-if"},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.Driver, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
					Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}}}}}}}
		var rep capacity.CheckReport
		st, err := timeRuns(o.Runs, func() (err error) {
			rep, err = capacitycheck.Check(ctx, kube, kubeobj.Own(""), capacity.CheckInput{})
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "capacity check (list + check, %s; %d violations over %d claims and %d devices\n", st, len(rep.Violations), rep.Claims, rep.Devices)
		var fits []capacity.NodeFit
		st, err = timeRuns(o.Runs, func() error {
			c, err := kubeobj.CapacityCluster(ctx, kube)
			if err == nil {
				fits, err = capacity.Fit(ctx, c, []*resourcev1.ResourceClaim{probe}, "", false)
			}
			return err
		})
		if err != nil {
			return err
		}
		n := 0
		for _, f := range fits {
			if f.Fits {
				n++
			}
		}
		fmt.Fprintf(o.Out, "what-if on every node (list + allocator, %s; fits on %d of %d nodes\n", st, n, len(fits))
		return hygieneScans(ctx, func(ctx context.Context, pol capacity.HygienePolicy, now time.Time) ([]capacity.Finding, error) {
			return capacitycheck.Scan(ctx, kube, pol, now)
		}, o)
	})
}
