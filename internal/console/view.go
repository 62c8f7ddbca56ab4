package console

import (
	"cmp"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// States in the order the page counts them.
var states = []devicemsg.State{devicemsg.Healthy, devicemsg.Suspect, devicemsg.Restricted, devicemsg.Quarantined, devicemsg.Recovering, devicemsg.Released, devicemsg.Retired}

// stateName is how the page names a state.
func stateName(s devicemsg.State) string {
	if s == devicemsg.Recovering {
		return "In review"
	}
	return string(s)
}

// NoPool is how the filter names the nodes that carry no pool label.
const NoPool = "(none)"

// Filter narrows the fleet page: by state, node (a substring), driver and node pool.
type Filter struct {
	State, Node, Driver, Pool string
}

func filterOf(q url.Values) Filter {
	return Filter{State: q.Get("state"), Node: q.Get("node"), Driver: q.Get("driver"), Pool: q.Get("pool")}
}

// Query is the filter as a query string, for links that keep it.
func (f Filter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"state": f.State, "node": f.Node, "driver": f.Driver, "pool": f.Pool} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

type stateCount struct {
	State, Name, Class string
	N                  int
	Href               string
}

type cell struct {
	Label, State, Class, Title, Href string
	Forms                            int
}

type nodeRow struct {
	Name  string
	Cells []cell
}

type group struct {
	Pool    string
	Nodes   []nodeRow
	Healthy []string // healthy nodes, collapsed
	Devices int
}

type fleetView struct {
	At      string
	Errors  []string
	Counts  []stateCount
	Total   int
	Filter  Filter
	Breaker *breakerView
	Groups  []group
	// Elsewhere are devices with a workflow on no node the inventory knows (a node gone, a
	// device-plugin device).
	Elsewhere []cell
	Drivers   []string
	Pools     []string
	// Migrations and Rollouts in flight.
	Migrations, Rollouts []flowRow
}

type flowRow struct {
	ID, Href, Since    string
	Name, Phase, State string
}

type breakerView struct {
	Open             bool
	Reason           string
	Used, Cap        int
	Window           string
	Waiting, Denied  int
	RestrictionsOpen bool
	// Held are the first devices waiting for the breaker, with links.
	Held []cell
}

func stateClass(s devicemsg.State) string { return "s-" + strings.ToLower(string(s)) }

// rank orders states by how far out of service they put a device.
func rank(s devicemsg.State) int {
	switch s {
	case devicemsg.Retired:
		return 6
	case devicemsg.Quarantined:
		return 5
	case devicemsg.Restricted:
		return 4
	case devicemsg.Recovering:
		return 3
	case devicemsg.Suspect:
		return 2
	case devicemsg.Released:
		return 1
	}
	return 0
}

// fleet builds the fleet page's view of a snapshot.
func fleet(s *Snapshot, f Filter) fleetView {
	v := fleetView{At: s.At.UTC().Format(time.RFC3339), Errors: s.Errors, Filter: f}
	counts := map[devicemsg.State]int{}
	seen := map[device.ID]bool{}
	drivers, pools := map[string]bool{}, map[string]bool{}
	var forms map[device.ID][]device.ID
	var labels map[device.ID]string
	mkcell := func(id device.ID) cell {
		d, ok := s.Devices[id]
		if !ok {
			// A unit without a workflow of its own shows its worst form's.
			for _, f := range forms[id] {
				if fd, fok := s.Devices[f]; fok && (!ok || rank(fd.State) > rank(d.State)) {
					d, ok = fd, true
				}
			}
		}
		st := devicemsg.Healthy
		title := stateName(st)
		if ok {
			st = d.State
			title = fmt.Sprintf("%s since %s", stateName(st), d.Since.UTC().Format(time.RFC3339))
			if d.Repair != "" {
				title += ", repair " + d.Repair
			}
			if d.Cause != "" {
				title += ", cause " + d.Cause
			}
		}
		c := cell{Label: id.Device, State: string(st), Class: stateClass(st), Title: id.String() + ": " + title,
			Href: "/device?id=" + url.QueryEscape(id.String())}
		if ok {
			c.Forms = d.Forms
		}
		if n := len(forms[id]); n > 0 {
			c.Forms, c.Label = n, labels[id]
		}
		return c
	}
	keep := func(id device.ID, c cell) bool {
		return (f.State == "" || f.State == c.State) && (f.Driver == "" || f.Driver == id.Driver)
	}
	byPool := map[string]*group{}
	for _, n := range s.Nodes {
		pools[n.Pool] = true
		g := byPool[n.Pool]
		if g == nil {
			g = &group{Pool: n.Pool}
			byPool[n.Pool] = g
		}
		row := nodeRow{Name: n.Name}
		healthy := true
		forms, labels = n.Forms, n.Labels
		for _, id := range n.Devices {
			seen[id] = true
			for _, f := range forms[id] {
				seen[f] = true
			}
			drivers[id.Driver] = true
			c := mkcell(id)
			counts[devicemsg.State(c.State)]++
			v.Total++
			g.Devices++
			if c.State != string(devicemsg.Healthy) {
				healthy = false
			}
			if keep(id, c) {
				row.Cells = append(row.Cells, c)
			}
		}
		if (f.Node != "" && !strings.Contains(n.Name, f.Node)) || (f.Pool != "" && f.Pool != cmp.Or(n.Pool, NoPool)) || len(row.Cells) == 0 {
			continue
		}
		if healthy && f.State == "" {
			g.Healthy = append(g.Healthy, n.Name)
			continue
		}
		g.Nodes = append(g.Nodes, row)
	}
	forms, labels = nil, nil
	for id, d := range s.Devices {
		if seen[id] {
			continue
		}
		counts[d.State]++
		v.Total++
		if c := mkcell(id); keep(id, c) && (f.Node == "" || strings.Contains(d.Node, f.Node)) && f.Pool == "" {
			c.Label = id.String()
			v.Elsewhere = append(v.Elsewhere, c)
		}
	}
	sort.Slice(v.Elsewhere, func(i, j int) bool { return v.Elsewhere[i].Label < v.Elsewhere[j].Label })
	for _, st := range states {
		q := f
		q.State = string(st)
		v.Counts = append(v.Counts, stateCount{State: string(st), Name: stateName(st), Class: stateClass(st), N: counts[st], Href: "/?" + q.Query()})
	}
	for _, g := range byPool {
		if len(g.Nodes) > 0 || len(g.Healthy) > 0 {
			v.Groups = append(v.Groups, *g)
		}
	}
	sort.Slice(v.Groups, func(i, j int) bool { return v.Groups[i].Pool < v.Groups[j].Pool })
	v.Drivers, v.Pools = sortedKeys(drivers), sortedKeys(pools)
	if b := s.Breaker; b != nil {
		used := 0
		for _, g := range b.Grants {
			if g.Until.IsZero() {
				used++
			}
		}
		v.Breaker = &breakerView{Open: b.Open, Reason: b.Reason, Used: used, Cap: b.Config.Limit(b.Known), Window: b.Config.Window.String(),
			Waiting: len(b.Waiting), Denied: b.Denied, RestrictionsOpen: b.RestrictionsOpen}
		for _, w := range b.Waiting[:min(len(b.Waiting), 20)] {
			if id, err := device.ParseID(w); err == nil {
				c := mkcell(id)
				c.Label = w
				v.Breaker.Held = append(v.Breaker.Held, c)
			}
		}
	}
	for _, m := range s.Migrations {
		v.Migrations = append(v.Migrations, flowRow{ID: m.ID, Since: when(m.Started)})
	}
	for _, r := range s.Rollouts {
		v.Rollouts = append(v.Rollouts, flowRow{ID: r.ID, Since: when(r.Started), Name: r.Name, Phase: r.Phase, State: r.State})
	}
	return v
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
