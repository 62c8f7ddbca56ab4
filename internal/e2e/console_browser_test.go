//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/console"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/sim"
)

// chromiumPath is the browser the make target installed (DEVICEWARDEN_CHROMIUM), or chromium on PATH.
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("DEVICEWARDEN_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no Chromium here (make test-e2e installs Debian's chromium as root): the browser test cannot run")
	}
	return p
}

// artefacts is where the browser test writes its screenshots: DEVICEWARDEN_ARTEFACTS, or a
// directory of the test's.
func artefacts(t *testing.T) string {
	if d := os.Getenv("DEVICEWARDEN_ARTEFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestFleetPageInABrowser: the fleet page of the real stack, in Chromium. A device turns
// Quarantined on the page after `sim health`; its link leads to its page, which shows the reason
// and the rule; every link on both pages answers 200, and the browser's console has no error.
func TestFleetPageInABrowser(t *testing.T) {
	inTurn(t)
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := shared.kube
	nodes, err := sim.CreateNodes(ctx, kube, "console", 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	bad := device.ID{Driver: sim.Driver, Pool: nodes[0], Device: "gpu-1"}
	runningPod(t, ctx, kube, sim.Workload{Namespace: "console", Name: "infer", Node: nodes[0], Index: ptr.To(1)})

	base, fleet := serveConsole(t, ctx, shared)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, stopAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer stopAlloc()
	bctx, stopBrowser := chromedp.NewContext(actx)
	defer stopBrowser()
	var mu sync.Mutex
	var consoleErrors []string
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				consoleErrors = append(consoleErrors, fmt.Sprintf("console.error %d args", len(e.Args)))
			}
		case *runtime.EventExceptionThrown:
			consoleErrors = append(consoleErrors, "exception: "+e.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				consoleErrors = append(consoleErrors, "log: "+e.Entry.Text+" "+e.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	for _, enable := range []func() error{
		func() error { _, err := chromedp.Call(bctx, log.Enable, cdp.Empty{}); return err },
		func() error { _, err := chromedp.Call(bctx, runtime.Enable, cdp.Empty{}); return err },
	} {
		if err := enable(); err != nil {
			t.Fatalf("enable the browser's console events: %v", err)
		}
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`.counts`))); err != nil {
		t.Fatalf("open the fleet page: %v", err)
	}

	// The device turns Unhealthy; the page (it reloads itself every second) shows it Quarantined.
	sel := fmt.Sprintf(`a.cell[data-state="Quarantined"][title^=%q]`, bad.String()+":")
	start := time.Now()
	if _, err := sim.SetHealth(ctx, kube, bad, corev1.ResourceHealthStatusUnhealthy, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	var href string
	eventually(t, time.Minute, bad.String()+" Quarantined on the fleet page", func() error {
		var err error
		href, err = chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => { const a = document.querySelector(%q); return a ? a.href : ""; })()`, sel)))
		if err != nil || href == "" {
			return fmt.Errorf("not yet (%v)", err)
		}
		return nil
	})
	seen := time.Since(start)
	dir := artefacts(t)
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fleet-page.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	fleetLinks := links(t, bctx)

	// Its link leads to its page: the reason and the rule.
	if err := chromedp.Do(bctx, chromedp.Navigate(href), chromedp.WaitVisible(chromedp.ID(`reason`))); err != nil {
		t.Fatalf("the device page: %v", err)
	}
	reason, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID(`reason`)))
	if err != nil {
		t.Fatal(err)
	}
	rule, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID(`rule`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "XID 79: fell off the bus") || !strings.Contains(rule, bad.TaintRuleName()) {
		t.Fatalf("device page: reason %q, rule %q", reason, rule)
	}
	// The quarantine's Event, on the Pod that holds the device.
	events, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID(`events`)))
	if err != nil || !strings.Contains(events, "Pod infer") || !strings.Contains(events, "DeviceQuarantined") {
		t.Fatalf("device page's Events: %q (%v)", events, err)
	}
	if shot, err = chromedp.Run(bctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "device-page.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	deviceLinks := links(t, bctx)

	// The trends: read from the workflows' records, with this quarantine in today's bar.
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/trends"), chromedp.WaitVisible(chromedp.ID(`reach`))); err != nil {
		t.Fatalf("the trends page: %v", err)
	}
	today, err := chromedp.Run(bctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#chart-quarantines title")].pop().textContent`))
	if _, n, ok := strings.Cut(today, ": "); err != nil || !ok || n == "0" || n == "" {
		t.Fatalf("today's quarantines on the trends page: %q (%v)", today, err)
	}
	if shot, err = chromedp.Run(bctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "trends-page.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range append(append(fleetLinks, deviceLinks...), links(t, bctx)...) {
		resp, err := http.Get(l)
		if err != nil {
			t.Fatalf("link %s: %v", l, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("link %s answered %d", l, resp.StatusCode)
		}
	}
	// Ten people look at once, each reloading 50 times a second: Temporal is still asked
	// once per refresh (three lists: devices, migrations, rollouts; and the breaker's query).
	before, watch := fleet.Calls.Load(), 6*time.Second
	var viewers sync.WaitGroup
	pages := make([]int, 10)
	for i := range pages {
		viewers.Add(1)
		go func() {
			defer viewers.Done()
			for end := time.Now().Add(watch); time.Now().Before(end); pages[i]++ {
				resp, err := http.Get(base + "/")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	viewers.Wait()
	calls, served := fleet.Calls.Load()-before, 0
	for _, n := range pages {
		served += n
	}
	if perMinute := float64(calls) * float64(time.Minute) / float64(watch); perMinute > 4*60+40 {
		t.Errorf("10 viewers, %d pages: %d Temporal calls in %s (%.0f a minute), want at most 4 per refresh", served, calls, watch, perMinute)
	}
	t.Logf("10 viewers: %d pages in %s, %d Temporal calls (%.0f a minute)", served, watch, calls, float64(calls)*float64(time.Minute)/float64(watch))
	mu.Lock()
	defer mu.Unlock()
	if len(consoleErrors) > 0 {
		t.Fatalf("the browser's console: %q", consoleErrors)
	}
	t.Logf("Quarantined on the fleet page %s after sim health (the page reloads every 1 s, the cache reads every 1 s); %d links answered 200; screenshots in %s",
		seen.Round(10*time.Millisecond), len(fleetLinks), dir)
}

// links are the addresses every link and stylesheet of the browser's page points to.
func links(t *testing.T, ctx context.Context) []string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("a[href], link[href]")].map(a => a.href).filter(h => h.startsWith("http"))`))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// serveConsole serves the fleet page on the stack's cluster and Temporal until the test ends, and
// returns its base URL once it answers, and its Temporal reader (which counts its calls).
func serveConsole(t *testing.T, ctx context.Context, s *stack) (string, *console.TemporalFleet) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cluster := &console.KubeCluster{Kube: s.kube}
	fleet := &console.TemporalFleet{Client: s.temporal, Namespace: "default"}
	srv := &console.Server{Cache: &console.Cache{Fleet: fleet, Cluster: cluster, History: fleet, Refresh: time.Second}, Flows: fleet,
		Events: cluster.Events, PageRefresh: time.Second}
	sctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() {
		if err := srv.Serve(sctx, addr); err != nil {
			t.Errorf("console: %v", err)
		}
	}()
	base := "http://" + addr
	eventually(t, 10*time.Second, "the console answers", func() error {
		resp, err := http.Get(base + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return base, fleet
}
