package console

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
)

// Flows reads one migration's or rollout's state.
type Flows interface {
	Migration(ctx context.Context, id string) (migrationplan.MigrationState, error)
	Rollout(ctx context.Context, id string) (api.RolloutStatus, error)
}

// Migration asks a migration's workflow for its state.
func (f *TemporalFleet) Migration(ctx context.Context, id string) (migrationplan.MigrationState, error) {
	var st migrationplan.MigrationState
	return st, f.query(ctx, id, &st)
}

// Rollout asks a rollout's workflow for its status.
func (f *TemporalFleet) Rollout(ctx context.Context, id string) (api.RolloutStatus, error) {
	var st api.RolloutStatus
	return st, f.query(ctx, id, &st)
}

func (f *TemporalFleet) query(ctx context.Context, id string, into any) error {
	f.Calls.Add(1)
	v, err := f.Client.QueryWorkflow(ctx, id, "", api.QueryState)
	if err != nil {
		return fmt.Errorf("query %s: %w", id, err)
	}
	return v.Get(into)
}

// answers keeps each workflow's answer to a query for a refresh (device states, migrations,
// rollouts); past max of them, all are dropped.
type answers struct {
	mu      sync.Mutex
	entries map[string]answer
}

type answer struct {
	at  time.Time
	v   any
	err error
}

func (c *answers) get(id string, ttl time.Duration, max int, read func() (any, error)) (any, error) {
	c.mu.Lock()
	e, ok := c.entries[id]
	c.mu.Unlock()
	if ok && time.Since(e.at) < ttl {
		return e.v, e.err
	}
	v, err := read()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > max {
		c.entries = map[string]answer{}
	}
	c.entries[id] = answer{at: time.Now(), v: v, err: err}
	return v, err
}

// flow serves /migration?id= and /rollout?id=: where one migration or rollout stands.
func (s *Server) flow(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		if id == "" {
			http.Error(w, kind+": want ?id=<workflow ID>", http.StatusBadRequest)
			return
		}
		data := map[string]any{"Page": page{Title: kind + " " + id, UI: s.ui(), At: when(time.Now())}, "ID": id, "WorkflowURL": s.workflowURL(id)}
		if s.Flows == nil {
			data["Error"] = "no " + kind + "s to read"
			s.render(w, kind, data)
			return
		}
		v, err := s.flows.get(kind+"/"+id, s.Cache.refresh(), 1000, func() (any, error) {
			if kind == "rollout" {
				return s.Flows.Rollout(r.Context(), id)
			}
			return s.Flows.Migration(r.Context(), id)
		})
		if err != nil {
			data["Error"] = err.Error()
		} else {
			data["St"] = v
		}
		s.render(w, kind, data)
	}
}
