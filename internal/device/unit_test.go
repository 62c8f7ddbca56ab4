package device

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// gpuOffers is one partitionable GPU as a driver with dynamic MIG publishes it: the whole device
// and its partitions, all drawing on the GPU's counter set.
func gpuOffers(gpu string, profiles ...string) []Offer {
	out := []Offer{{Name: gpu, CounterSets: []string{gpu + "-counters"}, Attributes: map[string]string{"uuid": "GPU-" + gpu}}}
	for _, p := range profiles {
		out = append(out, Offer{Name: gpu + "-mig-" + p, CounterSets: []string{gpu + "-counters"}, Attributes: map[string]string{"parentUUID": "GPU-" + gpu}})
	}
	return out
}

func units(us []Unit) map[string][]string {
	out := map[string][]string{}
	for _, u := range us {
		out[u.ID.Key] = u.Devices
	}
	return out
}

func TestUnitsGroupByCounterSets(t *testing.T) {
	offers := append(gpuOffers("gpu-0", "1g-10gb-0", "3g-40gb-0"), gpuOffers("gpu-1", "1g-10gb-0")...)
	offers = append(offers, Offer{Name: "nic-0"}) // draws on no counters: a unit of its own
	got := units(Units("gpu.nvidia.com", "node-a", offers, Grouping{}))
	want := map[string][]string{
		"counters=gpu-0-counters": {"gpu-0", "gpu-0-mig-1g-10gb-0", "gpu-0-mig-3g-40gb-0"},
		"counters=gpu-1-counters": {"gpu-1", "gpu-1-mig-1g-10gb-0"},
		"nic-0":                   {"nic-0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("units %v\nwant %v", got, want)
	}
}

// A device that draws on two counter sets joins them: a fault of either reaches it, and through
// it the other set's devices share its hardware.
func TestUnitsJoinCounterSetsADeviceDrawsOnTogether(t *testing.T) {
	offers := []Offer{
		{Name: "a", CounterSets: []string{"set-1"}},
		{Name: "b", CounterSets: []string{"set-2"}},
		{Name: "ab", CounterSets: []string{"set-2", "set-1"}},
		{Name: "c", CounterSets: []string{"set-3"}},
	}
	got := units(Units("d", "p", offers, Grouping{}))
	want := map[string][]string{"counters=set-1+set-2": {"a", "ab", "b"}, "counters=set-3": {"c"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("units %v\nwant %v", got, want)
	}
}

func TestUnitsByAttribute(t *testing.T) {
	offers := gpuOffers("gpu-0", "1g-10gb-0", "2g-20gb-0")
	// The whole device carries uuid, its partitions parentUUID: grouping by parentUUID leaves the
	// whole device a unit of its own, as the driver's attribute says.
	got := units(Units("d", "p", offers, Grouping{Attribute: "parentUUID"}))
	want := map[string][]string{"parentUUID=GPU-gpu-0": {"gpu-0-mig-1g-10gb-0", "gpu-0-mig-2g-20gb-0"}, "gpu-0": {"gpu-0"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("units %v\nwant %v", got, want)
	}
}

func TestUnitsIndependent(t *testing.T) {
	got := Units("d", "p", gpuOffers("gpu-0", "1g-10gb-0"), Grouping{Independent: true})
	if len(got) != 2 || got[0].Shared() || got[1].Shared() {
		t.Fatalf("independent partitions: %+v, want one unit per device", got)
	}
	if u, ok := Of(got, "gpu-0-mig-1g-10gb-0"); !ok || u.ID.Key != "gpu-0-mig-1g-10gb-0" {
		t.Fatalf("Of: %+v %v", u, ok)
	}
	if _, ok := Of(got, "gpu-9"); ok {
		t.Fatal("Of found a device the pool does not publish")
	}
}

// Whatever the offers, each device is in exactly one unit, and two devices that draw on a common
// counter set are in the same one; two devices share a unit only when a chain of shared counter
// sets joins them.
func TestUnitsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 12).Draw(rt, "devices")
		var offers []Offer
		for i := range n {
			sets := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"s0", "s1", "s2", "s3", "s4"}), 0, 2, rapid.ID[string]).Draw(rt, fmt.Sprintf("sets%d", i))
			offers = append(offers, Offer{Name: fmt.Sprintf("dev-%d", i), CounterSets: sets})
		}
		us := Units("d", "p", offers, Grouping{})
		unitOf := map[string]string{}
		for _, u := range us {
			for _, d := range u.Devices {
				if prev, dup := unitOf[d]; dup {
					rt.Fatalf("%s in units %s and %s", d, prev, u.ID.Key)
				}
				unitOf[d] = u.ID.Key
			}
		}
		if len(unitOf) != n {
			rt.Fatalf("%d devices in units, want %d", len(unitOf), n)
		}
		// Joined: the transitive closure of "draws on a common set".
		joined := func(a, b Offer) bool {
			for _, s := range a.CounterSets {
				if slices.Contains(b.CounterSets, s) {
					return true
				}
			}
			return false
		}
		reach := map[string]map[string]bool{}
		for _, o := range offers {
			reach[o.Name] = map[string]bool{o.Name: true}
		}
		for changed := true; changed; {
			changed = false
			for _, a := range offers {
				for _, b := range offers {
					if reach[a.Name][b.Name] {
						continue
					}
					for c := range reach[a.Name] {
						if joined(offerNamed(offers, c), b) {
							reach[a.Name][b.Name], changed = true, true
							break
						}
					}
				}
			}
		}
		for _, a := range offers {
			for _, b := range offers {
				if same := unitOf[a.Name] == unitOf[b.Name]; same != reach[a.Name][b.Name] {
					rt.Fatalf("%s and %s: same unit %v, joined by shared counter sets %v", a.Name, b.Name, same, reach[a.Name][b.Name])
				}
			}
		}
	})
}

func offerNamed(offers []Offer, name string) Offer {
	for _, o := range offers {
		if o.Name == name {
			return o
		}
	}
	return Offer{}
}

// A device whose grouping attribute is empty is a unit of its own, not one of every device with
// an empty value; a unit names itself and its devices in full.
func TestUnitsEmptyAttributeAndNames(t *testing.T) {
	offers := []Offer{{Name: "a", Attributes: map[string]string{"parent": ""}}, {Name: "b", Attributes: map[string]string{"parent": ""}}}
	if got := Units("d", "p", offers, Grouping{Attribute: "parent"}); len(got) != 2 {
		t.Fatalf("empty attribute values grouped: %+v", got)
	}
	u := Units("gpu.example.com", "node-a", gpuOffers("gpu-0", "1g-10gb-0"), Grouping{})[0]
	if s := u.ID.String(); s != "gpu.example.com/node-a/counters=gpu-0-counters" {
		t.Fatalf("unit ID %q", s)
	}
	want := []ID{{Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0"}, {Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0-mig-1g-10gb-0"}}
	if got := u.DeviceIDs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("device IDs %v", got)
	}
}

// The whole device is the form a probe proves the unit on; a unit of one device has none to name,
// and a unit whose driver offers no whole form has none.
func TestUnitsNameTheWholeDevice(t *testing.T) {
	offers := gpuOffers("gpu-0", "1g-10gb-0", "1g-10gb-1")
	offers[0].Whole = true
	offers = append(offers, gpuOffers("gpu-1", "3g-40gb-0", "3g-40gb-1")[1:]...)
	offers = append(offers, Offer{Name: "nic-0", Whole: true})
	var got []string
	for _, u := range Units("d", "p", offers, Grouping{}) {
		got = append(got, u.ID.Key+":"+u.Whole)
	}
	want := []string{"counters=gpu-0-counters:gpu-0", "counters=gpu-1-counters:", "nic-0:"}
	if !slices.Equal(got, want) {
		t.Fatalf("whole devices %v, want %v", got, want)
	}
}

// A unit's ID stands in a device's place, so its key holds no '/' even when the grouping
// attribute is qualified by its domain.
func TestUnitKeysHoldNoSlash(t *testing.T) {
	offers := []Offer{{Name: "a", Attributes: map[string]string{"gpu.example.com/parent": "GPU-1"}},
		{Name: "b", Attributes: map[string]string{"gpu.example.com/parent": "GPU-1"}}}
	us := Units("d", "p", offers, Grouping{Attribute: "gpu.example.com/parent"})
	if len(us) != 1 || !us[0].Device().Valid() || !IsUnitKey(us[0].ID.Key) {
		t.Fatalf("units %+v: want one unit whose ID is a valid device ID", us)
	}
	if IsUnitKey("gpu-0-mig-1g-10gb-0") {
		t.Fatal("a device name read as a unit key")
	}
}
