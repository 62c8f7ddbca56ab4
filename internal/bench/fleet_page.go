package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/devicewarden/devicewarden/internal/console"
)

// fleetPageReads and fleetPageGets are how often the fleet page is timed: reads of the whole
// fleet, as a request after each refresh pays it, and pages from a cache that is fresh.
const fleetPageReads, fleetPageGets = 5, 50

// timeFleetPage times the fleet page on the live stack, as `run --console-listen` serves it: a
// read of the fleet (Temporal's visibility lists, every ResourceSlice and Node, the breaker), which
// the cache does at most once per refresh however many people watch, and a page answered from a
// fresh cache.
func timeFleetPage(ctx context.Context, st *stack, out io.Writer, label string) error {
	fleet := &console.TemporalFleet{Client: st.tc, Namespace: "default"}
	cluster := &console.KubeCluster{Kube: st.kube}
	var reads []time.Duration
	var devices, nodes int
	var unread []string
	for range fleetPageReads {
		c := &console.Cache{Fleet: fleet, Cluster: cluster, Refresh: time.Hour}
		start := time.Now()
		snap := c.Snapshot(ctx)
		reads = append(reads, time.Since(start))
		devices, nodes, unread = len(snap.Devices), len(snap.Nodes), snap.Errors
	}
	s := &console.Server{Cache: &console.Cache{Fleet: fleet, Cluster: cluster, Refresh: time.Hour}}
	h, err := s.Handler()
	if err != nil {
		return err
	}
	var pages []time.Duration
	var size int
	for i := range fleetPageGets + 1 {
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK {
			return fmt.Errorf("fleet page: status %d", rec.Code)
		}
		if i > 0 { // the first fills the cache
			pages, size = append(pages, time.Since(start)), rec.Body.Len()
		}
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	fmt.Fprintf(out, "%s: fleet page of %d nodes, %d device workflows: a read of the fleet p50 %s max %s (%d reads); a page from the cache p50 %s max %s (%d KB)\n",
		label, nodes, devices, ms(p50(reads)), ms(maxDuration(reads)), len(reads), ms(p50(pages)), ms(maxDuration(pages)), size/1024)
	if len(unread) > 0 {
		// The page shows what it read and says what it could not; so does the figure.
		fmt.Fprintf(out, "%s: fleet page: not all read (the figures above are of a partial read): %v\n", label, unread)
	}
	return nil
}
