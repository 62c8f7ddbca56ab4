package healthreport

import (
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
)

const driver = "gpu.example.com"

// slice is node's ResourceSlice of driver, its devices with their uuid and index attributes.
func slice(drv, node string, devs ...resourcev1.Device) resourcev1.ResourceSlice {
	return resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + drv},
		Spec: resourcev1.ResourceSliceSpec{Driver: drv, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node}, Devices: devs}}
}

func gpu(name, uuid string, index int64) resourcev1.Device {
	return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"uuid": {StringValue: ptr.To(uuid)}, "index": {IntValue: ptr.To(index)}}}
}

func byUUID(node, uuid string) Spec {
	return Spec{Node: node, Attribute: &Attribute{Name: "uuid", Value: uuid}, Health: "Unhealthy", Source: "nvsentinel"}
}

// Each class of report that cannot be acted on is refused with its reason, before any device is
// looked for.
func TestCheckRefusesWhatCannotBeActedOn(t *testing.T) {
	ok := byUUID("n1", "GPU-1")
	for _, tt := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"unknown health word", func(s *Spec) { s.Health = "Degraded" }, `unknown health value "Degraded": want Unhealthy, Unknown or Healthy`},
		{"health in another case", func(s *Spec) { s.Health = "unhealthy" }, "unknown health value"},
		{"no source", func(s *Spec) { s.Source = " " }, "names no source"},
		{"no device at all", func(s *Spec) { s.Attribute, s.Node = nil, "" }, "names no device: give spec.device"},
		{"an attribute with no value", func(s *Spec) { s.Attribute.Value = "" }, "names no device: spec.attribute needs"},
		{"an attribute with no node", func(s *Spec) { s.Node = "" }, "names no device: spec.attribute needs"},
		{"a device with no pool", func(s *Spec) { s.Attribute, s.Device = nil, &DeviceRef{Driver: driver, Name: "gpu-0"} }, "spec.device needs its driver, pool and name"},
		{"both ways", func(s *Spec) { s.Device = &DeviceRef{Driver: driver, Pool: "n1", Name: "gpu-0"} }, "names its device twice"},
		{"an unknown recovery action", func(s *Spec) { s.Cause.RecoveryAction = "reboot" }, `cause.recoveryAction "reboot": want NVML's GPU recovery action`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			a := *ok.Attribute
			s.Attribute = &a
			tt.edit(&s)
			err := s.Check()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			if _, err := Resolve(s, []resourcev1.ResourceSlice{slice(driver, "n1", gpu("gpu-0", "GPU-1", 0))}); err == nil {
				t.Fatal("resolved a report that does not check")
			}
		})
	}
	if err := ok.Check(); err != nil {
		t.Fatalf("a good report: %v", err)
	}
	for _, h := range []string{"Unhealthy", "Unknown", "Healthy"} {
		s := ok
		s.Health = h
		if got, err := s.HealthOf(); err != nil || string(got) != h {
			t.Fatalf("%s: %s %v", h, got, err)
		}
	}
}

// A report resolves to exactly one published device: by its DRA name, or by an attribute on its
// node; none or two is refused with the reason and the candidates.
func TestResolveFindsExactlyOneDevice(t *testing.T) {
	published := []resourcev1.ResourceSlice{
		slice(driver, "n1", gpu("gpu-0", "GPU-aaaa", 0), gpu("gpu-1", "GPU-bbbb", 1)),
		slice(driver, "n2", gpu("gpu-0", "GPU-cccc", 0)),
		slice("nic.example.com", "n1", resourcev1.Device{Name: "nic-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"nic.example.com/index": {IntValue: ptr.To(int64(1))}}}),
	}
	want := func(name string, s Spec, id device.ID, refusal string) {
		t.Helper()
		got, err := Resolve(s, published)
		switch {
		case refusal != "" && (err == nil || !strings.Contains(err.Error(), refusal)):
			t.Errorf("%s: got %v %v, want refused %q", name, got, err, refusal)
		case refusal == "" && (err != nil || got != id):
			t.Errorf("%s: got %v %v, want %v", name, got, err, id)
		}
	}
	n1g1 := device.ID{Driver: driver, Pool: "n1", Device: "gpu-1"}
	want("by uuid", byUUID("n1", "GPU-bbbb"), n1g1, "")
	want("by uuid in another case", byUUID("n1", "gpu-BBBB"), n1g1, "")
	qualified := byUUID("n1", "GPU-bbbb")
	qualified.Attribute.Name = driver + "/uuid"
	want("by the qualified name", qualified, n1g1, "")
	other := byUUID("n1", "GPU-bbbb")
	other.Attribute.Name = "other.example.com/uuid"
	want("by another domain's name", other, device.ID{}, "no such device: no device on node n1 publishes other.example.com/uuid=GPU-bbbb")
	want("a uuid of another node", byUUID("n1", "GPU-cccc"), device.ID{}, "no such device")
	byIndex := Spec{Node: "n1", Attribute: &Attribute{Name: "index", Value: "1"}, Health: "Unknown", Source: "npd"}
	want("an index two drivers publish", byIndex, device.ID{}, "2 devices match index=1 on node n1 (gpu.example.com/n1/gpu-1, nic.example.com/n1/nic-0)")
	byIndex.Driver = driver
	want("an index narrowed to one driver", byIndex, n1g1, "")
	exact := Spec{Device: &DeviceRef{Driver: driver, Pool: "n2", Name: "gpu-0"}, Health: "Unhealthy", Source: "dcgm"}
	want("by its DRA name", exact, device.ID{Driver: driver, Pool: "n2", Device: "gpu-0"}, "")
	exact.Device.Name = "gpu-9"
	want("a DRA name not published", exact, device.ID{}, "no such device: gpu.example.com/n2/gpu-9 is not published")
	exact.Device.Name = "gpu-1"
	want("a name published only in another pool", exact, device.ID{}, "no such device: gpu.example.com/n2/gpu-1 is not published")
	typed := []resourcev1.ResourceSlice{slice(driver, "n3", resourcev1.Device{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"driverVersion": {VersionValue: ptr.To("580.65.6")}, "mig": {BoolValue: ptr.To(true)}}})}
	for _, a := range []Attribute{{Name: "driverVersion", Value: "580.65.6"}, {Name: "mig", Value: "true"}} {
		s := Spec{Node: "n3", Attribute: &a, Health: "Unhealthy", Source: "dcgm"}
		if got, err := Resolve(s, typed); err != nil || got.Device != "gpu-0" {
			t.Errorf("by %s: %v %v", a.Name, got, err)
		}
		a.Value = "x"
		if _, err := Resolve(s, typed); err == nil {
			t.Errorf("by %s=x: resolved", a.Name)
		}
	}
}

// A report reads from its unstructured form; one whose fields have the wrong types says so.
func TestFromObject(t *testing.T) {
	r, err := FromObject(map[string]any{
		"metadata": map[string]any{"name": "r1", "generation": int64(2)},
		"spec": map[string]any{"node": "n1", "attribute": map[string]any{"name": "uuid", "value": "GPU-1"}, "health": "Unhealthy",
			"cause": map[string]any{"code": "xid:79", "recommendedAction": "RESTART_BM"}, "message": "fell off the bus", "source": "nvsentinel",
			"observedTime": "2026-12-05T10:00:00Z"},
		"status": map[string]any{"outcome": "Resolved", "device": "d/p/g"},
	})
	if err != nil || r.Name != "r1" || r.Generation != 2 || r.Spec.Attribute.Value != "GPU-1" || r.Spec.Cause.Code != "xid:79" ||
		r.Spec.ObservedTime == nil || r.Spec.ObservedTime.Year() != 2026 || r.Status.Outcome != Resolved {
		t.Fatalf("%+v %v", r, err)
	}
	if got := r.Spec.What(); got != "nvsentinel: xid:79; fell off the bus; recommended: RESTART_BM" {
		t.Fatalf("what: %q", got)
	}
	if _, err := FromObject(map[string]any{"spec": map[string]any{"health": 3}}); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("a health that is a number: %v", err)
	}
}

// A report DeviceWarden writes reads back as written, and names its device exactly.
func TestObjectReadsBack(t *testing.T) {
	spec := Spec{Device: &DeviceRef{Driver: driver, Pool: "n1", Name: "gpu-3"}, Health: "Unhealthy", Source: "devicewarden",
		Cause: Cause{Code: "reset-domain-failed"}, Message: "the reset of gpu-0 failed"}
	obj, err := spec.Object("r2")
	if err != nil {
		t.Fatal(err)
	}
	if obj["apiVersion"] != Group+"/"+Version || obj["kind"] != Kind {
		t.Fatalf("type %v %v", obj["apiVersion"], obj["kind"])
	}
	r, err := FromObject(obj)
	if err != nil || r.Name != "r2" || r.Spec.Device == nil || *r.Spec.Device != *spec.Device || r.Spec.Cause.Code != "reset-domain-failed" || r.Spec.Check() != nil {
		t.Fatalf("%+v %v", r, err)
	}
	if _, ok := obj["spec"].(map[string]any)["attribute"]; ok {
		t.Fatalf("an attribute it has not: %v", obj["spec"])
	}
}

// A report's cause: its code, recommended action and recovery action, and an XID its message gives.
func TestCauseOf(t *testing.T) {
	s := byUUID("n1", "GPU-1")
	s.Cause = Cause{Code: "79", RecommendedAction: "component_reset", RecoveryAction: "2"}
	s.Message, s.Source = "Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", "nvsentinel"
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	c := s.CauseOf()
	if c.XID != 79 || c.PCI != "0000:3b:00" || c.Action != "COMPONENT_RESET" || c.Recovery != "node-reboot" {
		t.Fatalf("cause %+v", c)
	}
	if w := s.What(); !strings.HasSuffix(w, "recommended: component_reset; recovery action: node-reboot") {
		t.Fatalf("what %q", w)
	}
}

// The forms of a partitionable GPU (the whole GPU and its partitions, drawing on one counter set)
// all publish its index: a node condition naming "GPU 1" names that one unit, not several
// devices, and resolves to the whole GPU. Forms of two GPUs, or devices drawing on nothing, stay
// ambiguous.
func TestAnIndexOfAPartitionedGPUNamesItsUnit(t *testing.T) {
	form := func(name string, index int64, set string, counters ...string) resourcev1.Device {
		d := gpu(name, "GPU-"+name, index)
		c := resourcev1.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourcev1.Counter{}}
		for _, n := range counters {
			c.Counters[n] = resourcev1.Counter{}
		}
		d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{c}
		return d
	}
	published := []resourcev1.ResourceSlice{slice(driver, "n1",
		form("gpu-1-mig-1g", 1, "gpu-1", "memory"),
		form("gpu-1", 1, "gpu-1", "memory", "slice0", "slice1"),
		form("gpu-1-mig-3g", 1, "gpu-1", "memory", "slice0"),
		form("gpu-2", 2, "gpu-2", "memory", "slice0", "slice1"),
		form("gpu-2-mig-1g", 2, "gpu-3", "memory"), // a form of another counter set
		gpu("gpu-4", "GPU-4", 4), gpu("gpu-4b", "GPU-4b", 4),
	)}
	byIndex := func(i string) Spec {
		return Spec{Node: "n1", Attribute: &Attribute{Name: "index", Value: i}, Health: "Unhealthy", Source: "npd"}
	}
	if got, err := Resolve(byIndex("1"), published); err != nil || got.Device != "gpu-1" {
		t.Fatalf("GPU 1: %v %v, want the whole gpu-1", got, err)
	}
	for _, i := range []string{"2", "4"} {
		if got, err := Resolve(byIndex(i), published); err == nil || !strings.Contains(err.Error(), "2 devices match") {
			t.Errorf("index %s: %v %v, want refused as ambiguous", i, got, err)
		}
	}
}
