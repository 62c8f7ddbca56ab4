package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// gatedFleet answers Devices only when let through, to hold a refresh in flight.
type gatedFleet struct {
	fakeFleet
	gate   chan struct{}
	states int
}

func (g *gatedFleet) Devices(ctx context.Context) ([]Device, error) {
	<-g.gate
	return g.fakeFleet.Devices(ctx)
}

func (g *gatedFleet) State(ctx context.Context, id device.ID) (devicemsg.DeviceView, error) {
	g.states++
	return devicemsg.DeviceView{Device: id, State: devicemsg.Quarantined}, nil
}

// While a refresh is in flight, a viewer gets the last snapshot at once; the first viewer, with
// none yet, waits for it (or for its own request's end, with a word that the fleet is being read).
func TestViewersDoNotWaitForARefresh(t *testing.T) {
	g := &gatedFleet{gate: make(chan struct{})}
	c := &Cache{Fleet: g, Cluster: fakeCluster{}, Refresh: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan *Snapshot)
	go func() { first <- c.Snapshot(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if s := c.Snapshot(ctx); !strings.Contains(strings.Join(s.Errors, ""), "being read") {
		t.Fatalf("a viewer that gave up waiting: %+v", s)
	}
	g.gate <- struct{}{}
	old := <-first
	c.Refresh = time.Nanosecond
	time.Sleep(time.Millisecond)
	go func() { first <- c.Snapshot(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	if s := c.Snapshot(context.Background()); s != old {
		t.Fatal("a viewer waited for the refresh in flight instead of getting the last snapshot")
	}
	g.gate <- struct{}{}
	if s := <-first; s == old || g.lists.Load() != 2 {
		t.Fatalf("the refresh: %d lists", g.lists.Load())
	}
}

// A device's state is asked of its workflow once per refresh.
func TestDeviceStatesAreCached(t *testing.T) {
	g := &gatedFleet{}
	c := &Cache{Fleet: g, Cluster: fakeCluster{}, Refresh: time.Hour}
	id := gpu("node-a", 1)
	for range 3 {
		if st, err := c.State(context.Background(), id); err != nil || st.State != devicemsg.Quarantined {
			t.Fatal(st, err)
		}
	}
	if g.states != 1 {
		t.Fatalf("asked %d times within a refresh", g.states)
	}
	c.Refresh = time.Nanosecond
	time.Sleep(time.Millisecond)
	c.State(context.Background(), id)
	if g.states != 2 {
		t.Fatalf("asked %d times after the refresh", g.states)
	}
	if (&Cache{}).refresh() != DefaultRefresh {
		t.Fatal("no default refresh")
	}
}

// A filter's query string names only what it filters; the counts' links keep the other filters.
func TestFilterQuery(t *testing.T) {
	if q := (Filter{State: "Quarantined", Pool: NoPool}).Query(); q != "pool=%28none%29&state=Quarantined" {
		t.Fatalf("query %q", q)
	}
	if q := (Filter{}).Query(); q != "" {
		t.Fatalf("empty filter %q", q)
	}
	v := fleet(&Snapshot{}, Filter{Node: "n1"})
	if v.Counts[3].Href != "/?node=n1&state=Quarantined" || v.Counts[4].Name != "In review" {
		t.Fatalf("counts %+v", v.Counts)
	}
}

// The breaker's line counts the window's automatic actions, not the node permits held, against
// the cap for the fleet it knows, and lists at most 20 held devices.
func TestBreakerLine(t *testing.T) {
	b := &breaker.State{Config: breaker.Config{Window: 10 * time.Minute, MaxCount: 20, MaxPercent: 10}, Known: 50}
	b.Grants = []breaker.Grant{{Device: "d/p/gpu-0", Action: devicemsg.Quarantined}, {Device: "node:n1", Action: breaker.Reboot, Until: time.Now().Add(time.Hour)}}
	for i := range 25 {
		b.Waiting = append(b.Waiting, gpu("node-w", i%10).String())
	}
	v := fleet(&Snapshot{Breaker: b}, Filter{})
	if v.Breaker.Used != 1 || v.Breaker.Cap != 5 || v.Breaker.Waiting != 25 || len(v.Breaker.Held) != 20 {
		t.Fatalf("breaker line %+v", v.Breaker)
	}
}
