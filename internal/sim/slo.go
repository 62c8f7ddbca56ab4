package sim

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
)

// ServiceMetrics is a simulated inference service's /metrics: every scrape counts Requests more
// requests, the given share of them failed (code 500), so PromQL over it reads a business SLO.
type ServiceMetrics struct {
	// Requests counted per scrape (default 100).
	Requests int

	mu       sync.Mutex
	errRate  float64
	ok, fail float64
}

// SetErrorRate sets the share of requests that fail from now on (0..1).
func (m *ServiceMetrics) SetErrorRate(r float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errRate = math.Min(math.Max(r, 0), 1)
}

// ServeHTTP answers a scrape in the Prometheus text format.
func (m *ServiceMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	n := float64(m.Requests)
	if n <= 0 {
		n = 100
	}
	bad := math.Round(n * m.errRate)
	m.fail += bad
	m.ok += n - bad
	ok, fail := m.ok, m.fail
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP sim_requests_total Requests the simulated service answered.\n# TYPE sim_requests_total counter\n")
	fmt.Fprintf(w, "sim_requests_total{code=\"200\"} %g\nsim_requests_total{code=\"500\"} %g\n", ok, fail)
}

// Serve listens on a free loopback port and serves /metrics until the listener is closed; it
// returns the address.
func (m *ServiceMetrics) Serve() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), func() { _ = srv.Close() }, nil
}
