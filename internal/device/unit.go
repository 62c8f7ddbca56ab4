package device

import (
	"slices"
	"strings"
)

// A physical unit is one piece of hardware and every form a driver offers it in. A partitionable
// GPU is published as the whole device and its partitions (MIG profiles), all drawing on one
// counter set: a fault of the GPU is a fault of each of them. A device that draws on no counters
// is a unit of its own.

// CounterSetsKey starts the key of a unit grouped by counter sets.
const CounterSetsKey = "counters="

// Offer is one device as its pool publishes it: its name, the counter sets it draws on, and its
// attributes (only those a grouping reads are needed).
type Offer struct {
	Name        string
	CounterSets []string
	Attributes  map[string]string
	// Whole marks the form that takes every counter of the sets it draws on: the whole device.
	Whole bool
}

// Grouping says how a driver's devices form units. The zero value groups by shared counter sets.
type Grouping struct {
	// Attribute, when set, groups the devices that carry the same value of it (a parent UUID)
	// instead of by counter sets; a device without it is a unit of its own.
	Attribute string `json:"attribute,omitempty"`
	// Independent says the driver's partitions fail independently: every device is its own unit.
	Independent bool `json:"independent,omitempty"`
}

// UnitID names a unit: its driver, its pool, and a key within the pool: "counters=" and the
// counter sets its devices draw on, joined by "+"; "<attribute>=<value>" under an attribute
// grouping; or the device's name when it is a unit of its own. (Device names are DNS labels, so
// no key of the first two forms is a device's name.)
type UnitID struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Key    string `json:"key"`
}

// String is "<driver>/<pool>/<key>".
func (u UnitID) String() string { return u.Driver + "/" + u.Pool + "/" + u.Key }

// Unit is one physical unit and its devices, sorted by name.
type Unit struct {
	ID      UnitID   `json:"id"`
	Devices []string `json:"devices"`
	// Whole is the device that takes the whole unit ("" when the driver offers none): a probe on
	// it proves every form at once.
	Whole string `json:"whole,omitempty"`
}

// Device is the ID a shared unit's reports and workflow go by: the unit's key in its pool's
// place of a device name.
func (u Unit) Device() ID { return ID{Driver: u.ID.Driver, Pool: u.ID.Pool, Device: u.ID.Key} }

// IsUnitKey reports whether a device name is a shared unit's key, not a device's: device names
// are DNS labels, and unit keys carry '='.
func IsUnitKey(name string) bool { return strings.Contains(name, "=") }

// Shared says whether the unit offers more than one device.
func (u Unit) Shared() bool { return len(u.Devices) > 1 }

// DeviceIDs are the unit's devices as IDs.
func (u Unit) DeviceIDs() []ID {
	out := make([]ID, 0, len(u.Devices))
	for _, d := range u.Devices {
		out = append(out, ID{Driver: u.ID.Driver, Pool: u.ID.Pool, Device: d})
	}
	return out
}

// Units groups one pool's devices into physical units, sorted by key. Under the counter-set
// grouping, devices that draw on a common counter set are one unit, and so, transitively, are
// the counter sets a device draws on together.
func Units(driver, pool string, offers []Offer, g Grouping) []Unit {
	byKey := map[string][]string{}
	whole := map[string]bool{}
	for _, o := range offers {
		if o.Whole {
			whole[o.Name] = true
		}
	}
	switch {
	case g.Independent:
		for _, o := range offers {
			byKey[o.Name] = append(byKey[o.Name], o.Name)
		}
	case g.Attribute != "":
		for _, o := range offers {
			key := o.Name
			if v, ok := o.Attributes[g.Attribute]; ok && v != "" {
				// A key never holds '/': it takes a device name's place in IDs and workflow IDs.
				key = strings.ReplaceAll(g.Attribute+"="+v, "/", "_")
			}
			byKey[key] = append(byKey[key], o.Name)
		}
	default:
		byKey = byCounterSets(offers)
	}
	out := make([]Unit, 0, len(byKey))
	for key, devs := range byKey {
		slices.Sort(devs)
		u := Unit{ID: UnitID{Driver: driver, Pool: pool, Key: key}, Devices: slices.Compact(devs)}
		if i := slices.IndexFunc(u.Devices, func(d string) bool { return whole[d] }); i >= 0 && u.Shared() {
			u.Whole = u.Devices[i]
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b Unit) int { return strings.Compare(a.ID.Key, b.ID.Key) })
	return out
}

// byCounterSets joins counter sets drawn on by one device (a union-find over set names) and
// keys each group of devices by its sets.
func byCounterSets(offers []Offer) map[string][]string {
	parent := map[string]string{}
	var find func(string) string
	find = func(s string) string {
		if p, ok := parent[s]; ok && p != s {
			root := find(p)
			parent[s] = root
			return root
		}
		parent[s] = s
		return s
	}
	for _, o := range offers {
		for _, cs := range o.CounterSets {
			a, b := find(o.CounterSets[0]), find(cs)
			if a != b {
				parent[max(a, b)] = min(a, b)
			}
		}
	}
	sets := map[string][]string{} // root -> its counter sets
	for s := range parent {
		r := find(s)
		sets[r] = append(sets[r], s)
	}
	keys := map[string]string{}
	for r, ss := range sets {
		slices.Sort(ss)
		keys[r] = CounterSetsKey + strings.Join(ss, "+")
	}
	out := map[string][]string{}
	for _, o := range offers {
		key := o.Name
		if len(o.CounterSets) > 0 {
			key = keys[find(o.CounterSets[0])]
		}
		out[key] = append(out[key], o.Name)
	}
	return out
}

// Of returns the unit that holds the device, and false when none does.
func Of(units []Unit, device string) (Unit, bool) {
	for _, u := range units {
		if slices.Contains(u.Devices, device) {
			return u, true
		}
	}
	return Unit{}, false
}
