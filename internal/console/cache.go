package console

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// DefaultRefresh is how old the cache's view may be before a request refreshes it.
const DefaultRefresh = 3 * time.Second

// Snapshot is the fleet as the cache last read it.
type Snapshot struct {
	At      time.Time
	Devices map[device.ID]Device
	Nodes   []Node
	Breaker *breaker.State
	// Migrations and Rollouts are the running ones.
	Migrations, Rollouts []Flow
	// Errors are what could not be read this time (the rest is shown).
	Errors []string
}

// Cache reads the fleet at most once per Refresh, however many requests ask: one request refreshes
// while the others are answered from the last snapshot (the first ones wait for it).
type Cache struct {
	Fleet   Fleet
	Cluster Cluster
	Refresh time.Duration

	// History, when set, gives the trends, read at most once per TrendRefresh.
	History History

	mu      sync.Mutex
	snap    *Snapshot
	loading chan struct{}
	states  answers
	trends  *trends
	trendMu sync.Mutex
}

// TrendRefresh is how old the trends may be before a request reads them again.
const TrendRefresh = time.Minute

// MaxTrendWorkflows bounds the device workflows one reading of the trends queries.
const MaxTrendWorkflows = 2000

// Trends are the last TrendDays days' figures, read at most once per TrendRefresh (one reader at a
// time; the others wait for it).
func (c *Cache) Trends(ctx context.Context) (trends, error) {
	c.trendMu.Lock()
	defer c.trendMu.Unlock()
	if c.History == nil {
		return trends{}, fmt.Errorf("no history to read trends from")
	}
	if c.trends != nil && time.Since(c.trends.at) < TrendRefresh {
		return *c.trends, nil
	}
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	r, err := c.History.Records(ctx, now.AddDate(0, 0, -TrendDays), MaxTrendWorkflows)
	if err != nil {
		return trends{}, err
	}
	t := trendsOf(r, now)
	t.at = now
	c.trends = &t
	return t, nil
}

func (c *Cache) refresh() time.Duration {
	if c.Refresh > 0 {
		return c.Refresh
	}
	return DefaultRefresh
}

// Snapshot is the newest snapshot, refreshed first when it is older than Refresh.
func (c *Cache) Snapshot(ctx context.Context) *Snapshot {
	c.mu.Lock()
	if c.snap != nil && time.Since(c.snap.At) < c.refresh() {
		s := c.snap
		c.mu.Unlock()
		return s
	}
	if c.loading != nil {
		wait, s := c.loading, c.snap
		c.mu.Unlock()
		if s != nil {
			return s
		}
		select {
		case <-wait:
		case <-ctx.Done():
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.snap == nil {
			return &Snapshot{At: time.Now(), Errors: []string{"the fleet is being read"}}
		}
		return c.snap
	}
	c.loading = make(chan struct{})
	c.mu.Unlock()
	s := c.read(context.WithoutCancel(ctx))
	c.mu.Lock()
	c.snap = s
	close(c.loading)
	c.loading = nil
	c.mu.Unlock()
	return s
}

func (c *Cache) read(ctx context.Context) *Snapshot {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s := &Snapshot{Devices: map[device.ID]Device{}}
	devices, err := c.Fleet.Devices(ctx)
	if err != nil {
		s.Errors = append(s.Errors, err.Error())
	}
	for _, d := range devices {
		s.Devices[d.ID] = d
	}
	if s.Nodes, err = c.Cluster.Nodes(ctx); err != nil {
		s.Errors = append(s.Errors, err.Error())
	}
	if s.Migrations, err = c.Fleet.Running(ctx, api.MigrateWorkflow); err != nil {
		s.Errors = append(s.Errors, err.Error())
	}
	if s.Rollouts, err = c.Fleet.Running(ctx, api.RolloutWorkflow); err != nil {
		s.Errors = append(s.Errors, err.Error())
	}
	if b, err := c.Fleet.Breaker(ctx); err != nil {
		s.Errors = append(s.Errors, err.Error())
	} else {
		s.Breaker = &b
	}
	s.At = time.Now()
	return s
}

// State is a device's state record, asked of its workflow at most once per Refresh.
func (c *Cache) State(ctx context.Context, id device.ID) (devicemsg.DeviceView, error) {
	v, err := c.states.get(id.String(), c.refresh(), 10000, func() (any, error) { return c.Fleet.State(ctx, id) })
	st, _ := v.(devicemsg.DeviceView)
	return st, err
}
