package localcluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Prometheus runs the Prometheus server the builder builds (from the Go module proxy, cached like
// the control plane) in dir, scraping each target (host:port, or host:port/path) every scrape. It
// returns its base URL once it is ready, and how to stop it; its log is dir/prometheus.log.
func (b *Builder) Prometheus(ctx context.Context, dir string, scrape time.Duration, targets ...string) (string, func(), error) {
	if err := b.BuildTools(ctx, "prometheus"); err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf("global: {scrape_interval: %s, evaluation_interval: %s}\nscrape_configs:\n", scrape, scrape)
	for i, t := range targets {
		host, path := t, "/metrics"
		if j := strings.IndexByte(t, '/'); j >= 0 {
			host, path = t[:j], t[j:]
		}
		cfg += fmt.Sprintf("  - job_name: target-%d\n    metrics_path: %q\n    static_configs: [{targets: [%q]}]\n", i, path, host)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(b.Binary("prometheus"), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	}
	url := "http://" + addr
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, stop, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			data, _ := os.ReadFile(logf.Name())
			return "", nil, fmt.Errorf("prometheus not ready within a minute (%v): %s", err, lastLines(string(data), 30))
		}
	}
}
