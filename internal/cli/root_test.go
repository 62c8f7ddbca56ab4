//go:build !lean

package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/devicewarden/devicewarden/internal/buildinfo"
)

var brokenPolicy, brokenPlan string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cli-test-")
	if err != nil {
		panic(err)
	}
	brokenPolicy = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(brokenPolicy, []byte("policies:\n  - name: a\n    match: {driver: d}\n    toleranceWindow: soon\n"), 0o644); err != nil {
		panic(err)
	}
	brokenPlan = filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(brokenPlan, []byte("name: p\npluginResource: x.io/gpu\nphases:\n  - name: a\n    nodes: pool=a\n    soak: forever\n"), 0o644); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestBadInputGetsAClearError(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{name: "device without pool", args: []string{"sim", "health", "--device", "gpu.sim.devicewarden.io/gpu-0", "--health", "Unhealthy"}, wantErr: "--device"},
		{name: "unknown health value", args: []string{"sim", "health", "--device", "d/p/gpu-0", "--health", "Degraded"}, wantErr: "--health"},
		{name: "missing required flag", args: []string{"sim", "health", "--device", "d/p/gpu-0"}, wantErr: "health"},
		{name: "unknown fault kind", args: []string{"sim", "health", "--device", "d/p/gpu-0", "--health", "Unhealthy", "--fault", "flaky"}, wantErr: "--fault \"flaky\""},
		{name: "a Healthy fault", args: []string{"sim", "health", "--device", "d/p/gpu-0", "--health", "Healthy", "--fault", "transient"}, wantErr: "not Healthy"},
		{name: "bad log level", args: []string{"--log-level", "loud", "cluster", "status"}, wantErr: "--log-level"},
		{name: "bad integer from env", env: map[string]string{"DEVICEWARDEN_COUNT": "many"}, args: []string{"sim", "nodes"}, wantErr: "DEVICEWARDEN_COUNT"},
		{name: "bad bool from env", env: map[string]string{"DEVICEWARDEN_DRY_RUN": "perhaps"}, args: []string{"run"}, wantErr: "DEVICEWARDEN_DRY_RUN"},
		{name: "tls cert without key", args: []string{"run", "--temporal-address", "x:7233", "--temporal-tls-cert", "c.pem"}, wantErr: "go together"},
		{name: "tls for the embedded server", args: []string{"run", "--temporal-api-key", "k"}, wantErr: "--temporal-address"},
		{name: "unknown compression", args: []string{"device", "show", "d/p/gpu-0", "--temporal-address", "127.0.0.1:1", "--temporal-compression", "zstd"}, wantErr: "want auto, gzip or none"},
		{name: "embedded Temporal in a cluster", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, args: []string{"run"}, wantErr: "--embed-temporal"},
		{name: "version output", args: []string{"version", "-o", "yaml"}, wantErr: "want text or json"},
		{name: "negative bench settle", args: []string{"bench", "quarantine", "--settle", "-1s"}, wantErr: "--settle"},
		{name: "bench storm on an unknown Temporal", args: []string{"bench", "storm", "--temporal", "cassandra"}, wantErr: "want embedded or postgres"},
		{name: "bench storm on no shards", args: []string{"bench", "storm", "--temporal", "postgres", "--shards", "0"}, wantErr: "--shards must be at least 1"},
		{name: "bench storm of no share", args: []string{"bench", "storm", "--share", "0"}, wantErr: "--share 0: want a part"},
		{name: "bench storm of more than the fleet", args: []string{"bench", "storm", "--share", "1.5"}, wantErr: "--share 1.5"},
		{name: "bench reports on a fleet too small", args: []string{"bench", "reports", "--devices", "100", "--fleet", "24"}, wantErr: "--fleet 24: want 0, or nodes enough for the 200 devices"},
		{name: "bench reports on a negative fleet", args: []string{"bench", "reports", "--fleet", "-1"}, wantErr: "--fleet -1"},
		{name: "bench dcgm on a negative fleet", args: []string{"bench", "dcgm", "--fleet", "-1"}, wantErr: "--fleet must be >= 0"},
		{name: "bench storm negative rest", args: []string{"bench", "storm", "--rest", "-1s"}, wantErr: "--rest must not be negative"},
		{name: "nodes out of range", args: []string{"sim", "nodes", "--devices", "0"}, wantErr: "--devices"},
		{name: "unknown flag", args: []string{"dev", "--frobnicate"}, wantErr: "unknown flag"},
		{name: "broken policy file", args: []string{"run", "--policy", brokenPolicy}, wantErr: "line 4"},
		{name: "missing policy file", args: []string{"run", "--policy", "/nonexistent/policy.yaml"}, wantErr: "read policy file"},
		{name: "breaker cap of zero", args: []string{"run", "--breaker-max-count", "0"}, wantErr: "breaker"},
		{name: "console address without a port", args: []string{"run", "--console-listen", "localhost"}, wantErr: `--console-listen "localhost"`},
		{name: "console refresh too often", args: []string{"run", "--console-refresh", "1ms"}, wantErr: "--console-refresh must be at least 100ms"},
		{name: "node pool label that is no label key", args: []string{"run", "--node-pool-labels", "pool name"}, wantErr: `--node-pool-labels: "pool name" is not a label key`},
		{name: "hygiene leak timeout of zero", args: []string{"run", "--hygiene-leak-timeout", "0"}, wantErr: "stuck timeout must be positive"},
		{name: "negative report retention", args: []string{"run", "--report-retention", "-1h"}, wantErr: "--report-retention must be 0 (keep) or positive"},
		{name: "an unknown recovery action", args: []string{"sim", "health", "--device", "d/p/gpu-0", "--health", "Unhealthy", "--recovery-action", "reboot-the-rack"}, wantErr: `--recovery-action "reboot-the-rack": want NVML's number or name`},
		{name: "a row-remap failure that is not permanent", args: []string{"sim", "health", "--device", "d/p/gpu-0", "--health", "Unhealthy", "--row-remap-failure", "--fault", "transient"}, wantErr: "--row-remap-failure is a permanent fault, not transient"},
		{name: "a Prometheus URL that is no URL", args: []string{"run", "--prometheus-url", "prometheus:9090"}, wantErr: "want http(s)://host:port"},
		{name: "a Prometheus interval under a second", args: []string{"run", "--prometheus-url", "http://p:9090", "--prometheus-interval", "10ms"}, wantErr: "want a second or more"},
		{name: "a signals section with an unknown kind", args: []string{"run", "--policy", "testdata/signals-bad.yaml"}, wantErr: "kind \"gauge\""},
		{name: "negative hygiene interval", args: []string{"run", "--hygiene-interval", "-1m"}, wantErr: "must not be negative"},
		{name: "unknown operator signal", args: []string{"device", "signal", "d/p/gpu-0", "reboot", "--actor", "x"}, wantErr: "want one of"},
		{name: "operator signal without actor", args: []string{"device", "signal", "d/p/gpu-0", "pause"}, wantErr: "--actor"},
		{name: "breaker resume without actor", args: []string{"breaker", "resume"}, wantErr: "--actor"},
		{name: "show a malformed device", args: []string{"device", "show", "gpu-0"}, wantErr: "driver"},
		{name: "unknown CDI style", args: []string{"sim", "health", "--device", "d/p/gpu-0", "--health", "Unhealthy", "--cdi", "uuid4"}, wantErr: "--cdi"},
		{name: "approvals without a signing secret", args: []string{"approvals", "--slack-approvers", "U1"}, wantErr: "--slack-signing-secret (the HTTP endpoint) or --slack-app-token"},
		{name: "approvals without approvers", args: []string{"approvals", "--slack-signing-secret", "s"}, wantErr: "nobody may approve"},
		{name: "approvals with a bot token for socket mode", args: []string{"approvals", "--slack-app-token", "xoxb-1", "--slack-approvers", "U1"}, wantErr: "app-level token"},
		{name: "run with approvals and no approvers", args: []string{"run", "--slack-signing-secret", "s"}, wantErr: "nobody may approve"},
		{name: "run with a bot token for socket mode", args: []string{"run", "--slack-app-token", "xoxb-1", "--slack-approvers", "U1"}, wantErr: "app-level token"},
		{name: "quarantine without actor", args: []string{"device", "quarantine", "d/p/gpu-0"}, wantErr: "--actor"},
		{name: "release of a malformed device", args: []string{"device", "release", "gpu-0", "--actor", "a"}, wantErr: "driver"},
		{name: "duration on release", args: []string{"device", "release", "d/p/gpu-0", "--actor", "a", "--duration", "1h"}, wantErr: "unknown flag"},
		{name: "bad extend duration", args: []string{"device", "extend", "d/p/gpu-0", "--actor", "a", "--duration", "2 days"}, wantErr: "duration"},
		{name: "show as yaml", args: []string{"device", "show", "d/p/gpu-0", "-o", "yaml"}, wantErr: "want text or json"},
		{name: "quarantine with a broken policy file", args: []string{"device", "quarantine", "d/p/gpu-0", "--actor", "a", "--policy", brokenPolicy}, wantErr: "line 4"},
		{name: "broken plan file", args: []string{"rollout", "start", "--plan", brokenPlan}, wantErr: "line 4: phase \"a\" names no classes"},
		{name: "missing plan file", args: []string{"rollout", "check", "--plan", "/nonexistent/plan.yaml"}, wantErr: "read plan"},
		{name: "rollout start without a plan", args: []string{"rollout", "start"}, wantErr: "plan"},
		{name: "approve without a phase", args: []string{"rollout", "approve", "gpu-dra", "--actor", "a"}, wantErr: "accepts 2 arg"},
		{name: "rollout command without actor", args: []string{"rollout", "rollback", "gpu-dra"}, wantErr: "--actor"},
		{name: "schedule without cron", args: []string{"rollout", "schedule", "--plan", brokenPlan}, wantErr: "cron"},
		{name: "schedule with an empty window", args: []string{"rollout", "schedule", "--plan", brokenPlan, "--cron", "* * * * *", "--window", "0s"}, wantErr: "--window"},
		{name: "misbehave with a negative drift", args: []string{"sim", "misbehave", "n1", "--drift", "-1"}, wantErr: "--drift"},
		{name: "pool without GPUs", args: []string{"sim", "pool", "a", "--gpus", "0"}, wantErr: "--gpus"},
		{name: "unenforced pool that is not shared", args: []string{"sim", "pool", "a", "--unenforced"}, wantErr: "--unenforced needs --shared"},
		{name: "pool with a bad driver version", args: []string{"sim", "pool", "a", "--driver-version", "v1"}, wantErr: "--driver-version \"v1\""},
		{name: "unenforced nodes that are not shared", args: []string{"sim", "nodes", "--unenforced"}, wantErr: "--unenforced needs --shared"},
		{name: "shared partitions", args: []string{"sim", "nodes", "--shared", "--partitions"}, wantErr: "choose one"},
		{name: "workload with a bad memory share", args: []string{"sim", "workload", "w", "--memory", "lots"}, wantErr: "--memory"},
		{name: "capacity check as yaml", args: []string{"capacity", "check", "-o", "yaml"}, wantErr: "want text or json"},
		{name: "capacity check with a missing tenants file", args: []string{"capacity", "check", "--tenants", "/nonexistent/t.yaml"}, wantErr: "read tenants file"},
		{name: "capacity fit without claims", args: []string{"capacity", "fit"}, wantErr: "claims"},
		{name: "capacity fit with a broken claims file", args: []string{"capacity", "fit", "--claims", brokenPlan}, wantErr: "document 1"},
		{name: "capacity fit past full utilisation", args: []string{"capacity", "fit", "--claims", brokenPlan, "--target", "1.5"}, wantErr: "--target"},
		{name: "fence without actor", args: []string{"capacity", "fence", "n1"}, wantErr: "--actor"},
		{name: "fence without a node", args: []string{"capacity", "fence", "--actor", "a"}, wantErr: "accepts 1 arg"},
		{name: "device-plugin health without a pod", args: []string{"sim", "health", "--device", "example.com/fpga/node-1/fpga-0", "--health", "Unhealthy"}, wantErr: "--pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(t, tt.env, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestEnvironmentSetsFlagsAndTheCommandLineWins(t *testing.T) {
	t.Setenv("DEVICEWARDEN_STATE_DIR", t.TempDir())
	out, err := run(t, nil, "cluster", "status")
	if err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("status from env state dir: %q %v", out, err)
	}
	if EnvName("temporal-tls-ca") != "DEVICEWARDEN_TEMPORAL_TLS_CA" {
		t.Fatal(EnvName("temporal-tls-ca"))
	}
	t.Setenv("DEVICEWARDEN_LOG_LEVEL", "loud")
	if _, err := run(t, nil, "--log-level", "warn", "cluster", "status"); err != nil {
		t.Fatalf("flag should win over a bad env value: %v", err)
	}
}

func TestVersion(t *testing.T) {
	out, err := run(t, nil, "version")
	if err != nil || !strings.HasPrefix(out, "devicewarden "+buildinfo.Version+" full (") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version: %v %q", err, out)
	}
	out, err = run(t, nil, "version", "-o", "json")
	if err != nil || !strings.Contains(out, `"goVersion": "`+runtime.Version()+`"`) {
		t.Fatalf("version -o json: %v %q", err, out)
	}
}
