package console

import (
	"context"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// A partitionable GPU is one cell: its forms (devices drawing on one counter set) fold into their
// unit, named by its whole form and counting its forms; the unit shows its own workflow's state,
// or its worst form's when it has none.
func TestAPartitionableGPUIsOneCell(t *testing.T) {
	whole := resourcev1.Device{Name: "gpu-0", ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counters"}}}
	part := func(name string) resourcev1.Device {
		return resourcev1.Device{Name: name, ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counters"}}}
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"}, Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com",
		Pool: resourcev1.ResourcePool{Name: "n1", ResourceSliceCount: 1}, NodeName: ptr.To("n1"),
		Devices: []resourcev1.Device{whole, part("gpu-0-mig-1g-0"), part("gpu-0-mig-1g-1"), {Name: "gpu-1"}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"karpenter.sh/nodepool": "a100"}}}
	nodes, err := (&KubeCluster{Kube: fake.NewClientset(slice, node)}).Nodes(context.Background())
	if err != nil || len(nodes) != 1 || len(nodes[0].Devices) != 2 || nodes[0].Pool != "a100" {
		t.Fatalf("nodes %+v, %v", nodes, err)
	}
	var unit device.ID
	for id, forms := range nodes[0].Forms {
		unit = id
		if len(forms) != 3 || nodes[0].Labels[id] != "gpu-0" {
			t.Fatalf("unit %s forms %v label %q", id, forms, nodes[0].Labels[id])
		}
	}
	form := device.ID{Driver: "gpu.example.com", Pool: "n1", Device: "gpu-0-mig-1g-1"}
	v := fleet(&Snapshot{Nodes: nodes, Devices: map[device.ID]Device{form: {ID: form, State: devicemsg.Quarantined}}}, Filter{})
	c := v.Groups[0].Nodes[0].Cells
	if len(c) != 2 || c[0].Label != "gpu-0" || c[0].Forms != 3 || c[0].State != string(devicemsg.Quarantined) || len(v.Elsewhere) != 0 || v.Total != 2 {
		t.Fatalf("cells %+v, elsewhere %+v, total %d", c, v.Elsewhere, v.Total)
	}
	v = fleet(&Snapshot{Nodes: nodes, Devices: map[device.ID]Device{form: {ID: form, State: devicemsg.Quarantined}, unit: {ID: unit, State: devicemsg.Recovering}}}, Filter{})
	if c := v.Groups[0].Nodes[0].Cells[0]; c.State != string(devicemsg.Recovering) || c.Href != "/device?id="+url.QueryEscape(unit.String()) {
		t.Fatalf("a unit with a workflow: %+v", c)
	}
}
