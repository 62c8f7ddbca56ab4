package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/promsignal"
	"github.com/devicewarden/devicewarden/internal/sim"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// DCGMOptions configures the DCGM XID -> quarantine benchmark.
type DCGMOptions struct {
	Devices  int
	CacheDir string
	Out      io.Writer
	// Scrape is Prometheus' scrape interval of the simulated dcgm-exporter, Interval the
	// watcher's query interval.
	Scrape, Interval time.Duration
	// Fleet, when set, places that many nodes of 8 GPUs, each held by a Pod, beside the idle
	// GPUs: their series are in Prometheus and in each of the watcher's answers too.
	Fleet int
}

// DCGM times an XID raised on an idle simulated GPU until its DeviceTaintRule is visible, through
// the simulated dcgm-exporter and a real Prometheus that scrapes it, one device at a time, and
// splits the delay: until Prometheus answers the new value (the exporter and the scrape), until the
// watcher's next query is answered (its interval), and the rest, which is DeviceWarden's.
func DCGM(ctx context.Context, o DCGMOptions) error {
	proxy := &recordingProxy{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	st, err := startStack(ctx, o.CacheDir, o.Out, app.ControllerOptions{Prometheus: &watcher.PromConfig{URL: "http://" + l.Addr().String(), Interval: o.Interval}}, nil)
	if err != nil {
		return err
	}
	defer st.stop()
	promURL, stopProm, err := dcgmPrometheus(ctx, st.kube, o)
	if err != nil {
		return err
	}
	defer stopProm()
	proxy.setTarget(promURL)
	const perNode = 8
	nodes, err := sim.CreateNodes(ctx, st.kube, "dcgm", (o.Devices+perNode-1)/perNode, perNode)
	if err != nil {
		return err
	}
	if o.Fleet > 0 {
		if _, err := placeFleet(ctx, st.kube, o.Fleet*fleetGPUsPerNode, o.Out); err != nil {
			return err
		}
	}
	seen, stopWatch, err := watchRules(ctx, st.kube, watch.Added)
	if err != nil {
		return err
	}
	defer stopWatch()
	// Every GPU's series is in Prometheus and read once by the watcher before the first XID.
	if err := waitSeries(ctx, promURL, len(nodes)*perNode+o.Fleet*fleetGPUsPerNode); err != nil {
		return err
	}
	time.Sleep(2 * o.Interval)
	fmt.Fprintf(o.Out, "[bench] XID 79 on %d idle GPUs, one at a time, beside %d held ones; Prometheus scrapes every %s, the watcher asks every %s\n", o.Devices, o.Fleet*fleetGPUsPerNode, o.Scrape, o.Interval)
	var whole, visible, wait, ours []time.Duration
	for i := range o.Devices {
		id := device.ID{Driver: sim.Driver, Pool: nodes[i/perNode], Device: "gpu-" + strconv.Itoa(i%perNode)}
		rule := seen(id.TaintRuleName())
		start := time.Now()
		if err := sim.SetXID(ctx, st.kube, id, 79); err != nil {
			return err
		}
		inProm, err := waitXID(ctx, promURL, sim.UUID(id))
		if err != nil {
			return err
		}
		var at time.Time
		select {
		case at = <-rule:
		case <-time.After(2*o.Scrape + 2*o.Interval + 30*time.Second):
			return fmt.Errorf("no DeviceTaintRule for %s", id)
		case <-ctx.Done():
			return ctx.Err()
		}
		asked := proxy.answeredAfter(inProm)
		if asked.IsZero() || asked.After(at) {
			asked = inProm // the watcher's query raced Prometheus' answer to ours
		}
		whole, visible = append(whole, at.Sub(start)), append(visible, inProm.Sub(start))
		wait, ours = append(wait, asked.Sub(inProm)), append(ours, at.Sub(asked))
	}
	printLatency(o.Out, "XID raised -> DeviceTaintRule visible (whole)", whole)
	printLatency(o.Out, "  XID raised -> Prometheus answers it (exporter + scrape)", visible)
	printLatency(o.Out, "  -> the watcher's next query answered (its interval)", wait)
	printLatency(o.Out, "  -> DeviceTaintRule visible (DeviceWarden's part)", ours)
	return nil
}

// dcgmPrometheus serves the simulated dcgm-exporter and runs a Prometheus that scrapes it.
func dcgmPrometheus(ctx context.Context, kube kubernetes.Interface, o DCGMOptions) (string, func(), error) {
	exp := &sim.Exporter{Kube: kube, Refresh: 200 * time.Millisecond}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: exp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	b := &localcluster.Builder{CacheDir: o.CacheDir, Out: o.Out}
	dir, err := os.MkdirTemp("", "devicewarden-bench-prom-")
	if err != nil {
		srv.Close()
		return "", nil, err
	}
	u, stop, err := b.Prometheus(ctx, dir, o.Scrape, l.Addr().String())
	if err != nil {
		srv.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	return u, func() { stop(); srv.Close(); os.RemoveAll(dir) }, nil
}

// instant asks Prometheus one instant query and returns its samples.
func instant(ctx context.Context, prom, query string) ([]promsignal.Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return promsignal.Parse(body)
}

func waitSeries(ctx context.Context, prom string, n int) error {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		vs, err := instant(ctx, prom, "DCGM_FI_DEV_XID_ERRORS")
		if err == nil && len(vs) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prometheus has %d of %d GPUs' series (%v)", len(vs), n, err)
		}
	}
}

// waitXID polls Prometheus every 10 ms until it answers the GPU's XID 79, and says when.
func waitXID(ctx context.Context, prom, uuid string) (time.Time, error) {
	q := `DCGM_FI_DEV_XID_ERRORS{UUID="` + uuid + `"} == 79`
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		vs, err := instant(ctx, prom, q)
		if err == nil && len(vs) > 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("prometheus never answered XID 79 for %s (%v)", uuid, err)
		}
	}
}

// recordingProxy passes the watcher's queries to Prometheus and remembers when each XID query
// was answered.
type recordingProxy struct {
	mu     sync.Mutex
	target *httputil.ReverseProxy
	times  []time.Time
}

func (p *recordingProxy) setTarget(u string) {
	t, _ := url.Parse(u)
	p.mu.Lock()
	p.target = httputil.NewSingleHostReverseProxy(t)
	p.mu.Unlock()
}

func (p *recordingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	t := p.target
	p.mu.Unlock()
	if t == nil {
		http.Error(w, "prometheus not started yet", http.StatusServiceUnavailable)
		return
	}
	t.ServeHTTP(w, r)
	if strings.Contains(r.URL.Query().Get("query"), "(DCGM_FI_DEV_XID_ERRORS)") {
		p.mu.Lock()
		p.times = append(p.times, time.Now())
		p.mu.Unlock()
	}
}

// answeredAfter is when the first XID query answered after t was (zero: none yet).
func (p *recordingProxy) answeredAfter(t time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.times {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}
