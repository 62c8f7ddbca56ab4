package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Pinned versions of the local control plane. Changing one rebuilds only that component.
const (
	KubernetesVersion = "v1.37.2"
	StagingVersion    = "v0.37.2"
	// EtcdVersion is the patch release whose module requirements the project's selection covers
	// (x/net, x/sys, otel, grpc): built at the project's floors it shares their compiled packages.
	// v3.7.3 raises x/sys, x/net and otel past them and compiled about 100 packages more.
	EtcdVersion = "v3.7.2"
	KwokVersion = "v0.8.0"
	// TemporalCLIVersion is the stock temporal CLI the tests use to prove operators' commands work.
	TemporalCLIVersion = "v1.5.1"
	// PrometheusVersion is the Prometheus server the rollout's PromQL gate tests query (Go module
	// v0.314.0 is Prometheus 3.14). Optional: built by `cluster build --tools prometheus`. Chosen,
	// like etcd's, for requirements the project's selection covers: 3.16 (v0.316.0) raises x/sys,
	// grpc, otel and logr past them, and a cold build compiled 676 packages not already compiled
	// for the project and the control plane instead of 390.
	PrometheusVersion = "v0.314.0"
	// TemporalServerVersion is the stock Temporal server, and its SQL schema tool, that the
	// PostgreSQL stack runs: the version the project embeds, so at the project's floors it shares
	// every compiled package of the embedded server. Optional: built by
	// `cluster build --tools temporal-server`.
	TemporalServerVersion = "v1.32.1"
	// HelmVersion is the helm that lints the chart and renders it for the e2e tests. Optional:
	// built by `cluster build --tools helm`.
	HelmVersion = "v3.22.0"
)

// notServed lists staging modules that kubernetes replaces locally but the module proxy does not serve.
var notServed = map[string]bool{
	"k8s.io/sample-cli-plugin": true,
	"k8s.io/sample-controller": true,
}

// component is one helper module built into one or more binaries.
type component struct {
	name     string
	version  string
	goMod    func(ctx context.Context) (string, error)
	packages map[string]string // binary name -> main package
	ldflags  string
	// tags are build tags (prometheus: only the static and file service discovery it is used with).
	tags string
	// post runs after a successful build in the helper module's directory.
	post func(ctx context.Context, dir string) error
	// optional components are built only when asked for by name (BuildTools).
	optional bool
	// floors: the module takes the project's module versions as floors (floors.go), checked to
	// build with them; but not those of the modules under the ownModules prefixes.
	floors     bool
	ownModules []string
	// unoptimized: a tool the tests run briefly (a client's commands, a lint, a few queries). The
	// packages only it compiles (those of modules the project does not build at the same version)
	// are built without optimizations or inlining (-N -l); those it shares with the project keep
	// their flags and come from the cache. The temporal CLI's compiled in 96 s instead of 140 s.
	unoptimized bool
}

// kwokStages are the stage files shipped in kwok's module that make fake nodes ready, keep their
// leases fresh and move pods through their lifecycle.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
	// No pod-complete stage: it would finish every Job's Pods at once whatever their devices; the
	// simulator's kubelet (internal/sim) completes run-to-completion Pods by their devices' faults.
}

func (b *Builder) stageDir() string { return filepath.Join(b.BinDir(), "kwok-stages") }

// moduleDir is where the helper module in dir has module's files (the module cache).
func (b *Builder) moduleDir(ctx context.Context, dir, module string) (string, error) {
	out, err := b.goCmd(ctx, dir, "list", "-m", "-json", module).Output()
	if err != nil {
		return "", fmt.Errorf("locate module %s: %w", module, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("locate module %s: %v", module, err)
	}
	return info.Dir, nil
}

// copyKwokStages copies the stage files out of the kwok module into the cache.
func (b *Builder) copyKwokStages(ctx context.Context, dir string) error {
	kwok, err := b.moduleDir(ctx, dir, "sigs.k8s.io/kwok")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(b.stageDir(), 0o755); err != nil {
		return err
	}
	for _, s := range kwokStages {
		data, err := os.ReadFile(filepath.Join(kwok, s))
		if err != nil {
			return fmt.Errorf("read kwok stage: %w", err)
		}
		if err := os.WriteFile(filepath.Join(b.stageDir(), filepath.Base(s)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Builder compiles the control-plane binaries from the Go module proxy into CacheDir.
type Builder struct {
	CacheDir string
	Out      io.Writer
	// GoBin is the go command; empty means "go" from PATH.
	GoBin string
	// Floors are the module versions the components that take floors are raised to; nil means
	// ProjectModules. A binary's stamp leaves them out: one built at other floors is as good.
	Floors map[string]string
}

// BinDir is where the built binaries live.
func (b *Builder) BinDir() string { return filepath.Join(b.CacheDir, "bin") }

// Binary returns the path of a built binary.
func (b *Builder) Binary(name string) string { return filepath.Join(b.BinDir(), name) }

func (b *Builder) components() []component {
	kubeLd := strings.Join([]string{
		"-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=37",
		"-X k8s.io/component-base/version.gitTreeState=clean",
		"-X k8s.io/client-go/pkg/version.gitVersion=" + KubernetesVersion,
		"-X k8s.io/client-go/pkg/version.gitMajor=1",
		"-X k8s.io/client-go/pkg/version.gitMinor=37",
	}, " ")
	// Largest first: Build starts the longest compile at once.
	return []component{
		{
			name: "kubernetes", version: KubernetesVersion,
			goMod:    b.kubernetesGoMod,
			floors:   true,
			packages: map[string]string{"kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver", "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler", "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager"},
			ldflags:  kubeLd,
		},
		{
			name: "temporal-cli", version: TemporalCLIVersion,
			goMod: func(context.Context) (string, error) {
				return fmt.Sprintf("module devicewarden.local/temporalclibuild\n\ngo 1.26\n\nrequire github.com/temporalio/cli %s\n", TemporalCLIVersion), nil
			},
			// Its Temporal server (v1.29) does not compile against the project's Temporal modules
			// or the nexus SDK they pull in; the rest (grpc, protobuf, the AWS SDK) it shares.
			floors:      true,
			ownModules:  []string{"go.temporal.io/", "github.com/temporalio/", "github.com/nexus-rpc/"},
			packages:    map[string]string{"temporal": "github.com/temporalio/cli/cmd/temporal"},
			unoptimized: true,
		},
		{
			name: "prometheus", version: PrometheusVersion, optional: true,
			goMod: func(context.Context) (string, error) {
				return fmt.Sprintf("module devicewarden.local/prometheusbuild\n\ngo 1.26\n\nrequire github.com/prometheus/prometheus %s\n", PrometheusVersion), nil
			},
			packages: map[string]string{"prometheus": "github.com/prometheus/prometheus/cmd/prometheus"},
			// The tests scrape static targets: without the cloud and Kubernetes service discovery
			// plugins the build compiles 1,043 packages instead of 1,517.
			tags:        "remove_all_sd",
			floors:      true,
			unoptimized: true,
		},
		{
			name: "temporal-server", version: TemporalServerVersion, optional: true,
			goMod: func(context.Context) (string, error) {
				return fmt.Sprintf("module devicewarden.local/temporalserverbuild\n\ngo 1.26\n\nrequire go.temporal.io/server %s\n", TemporalServerVersion), nil
			},
			packages: map[string]string{"temporal-server": "go.temporal.io/server/cmd/server", "temporal-sql-tool": "go.temporal.io/server/cmd/tools/sql"},
			post:     b.copyTemporalSchema,
			floors:   true,
		},
		{
			name: "helm", version: HelmVersion, optional: true,
			goMod: func(context.Context) (string, error) {
				return fmt.Sprintf("module devicewarden.local/helmbuild\n\ngo 1.26\n\nrequire helm.sh/helm/v3 %s\n", HelmVersion), nil
			},
			packages:    map[string]string{"helm": "helm.sh/helm/v3/cmd/helm"},
			floors:      true,
			unoptimized: true,
		},
		{
			name: "kwok", version: KwokVersion,
			goMod: func(context.Context) (string, error) {
				return fmt.Sprintf("module devicewarden.local/kwokbuild\n\ngo 1.26\n\nrequire sigs.k8s.io/kwok %s\n", KwokVersion), nil
			},
			packages: map[string]string{"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
			post:     b.copyKwokStages,
			floors:   true,
		},
		{
			name: "etcd", version: EtcdVersion,
			goMod: func(context.Context) (string, error) {
				var sb strings.Builder
				fmt.Fprintf(&sb, "module devicewarden.local/etcdbuild\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n\n", EtcdVersion)
				for _, m := range []string{"api/v3", "client/pkg/v3", "client/v3", "pkg/v3"} {
					fmt.Fprintf(&sb, "replace go.etcd.io/etcd/%s => go.etcd.io/etcd/%s %s\n", m, m, EtcdVersion)
				}
				return sb.String(), nil
			},
			packages: map[string]string{"etcd": "go.etcd.io/etcd/server/v3"},
			floors:   true,
		},
	}
}

var stagingReplace = regexp.MustCompile(`(?m)^\s*(k8s\.io/[a-z0-9-]+) => \./staging/`)

// kubernetesGoMod requires k8s.io/kubernetes and replaces each of its ./staging modules with the published one.
func (b *Builder) kubernetesGoMod(ctx context.Context) (string, error) {
	out, err := b.goCmd(ctx, "", "list", "-m", "-json", "k8s.io/kubernetes@"+KubernetesVersion).Output()
	if err != nil {
		return "", fmt.Errorf("look up k8s.io/kubernetes %s: %w", KubernetesVersion, err)
	}
	var info struct{ GoMod string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("parse module info: %w", err)
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return "", fmt.Errorf("read kubernetes go.mod: %w", err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "module devicewarden.local/kubebuild\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\n", KubernetesVersion)
	n := 0
	for _, m := range stagingReplace.FindAllSubmatch(upstream, -1) {
		mod := string(m[1])
		if notServed[mod] {
			continue
		}
		fmt.Fprintf(&sb, "replace %s => %s %s\n", mod, mod, StagingVersion)
		n++
	}
	if n == 0 {
		return "", fmt.Errorf("no staging replaces found in kubernetes go.mod")
	}
	return sb.String(), nil
}

func (b *Builder) goCmd(ctx context.Context, dir string, args ...string) *exec.Cmd {
	gobin := b.GoBin
	if gobin == "" {
		gobin = "go"
	}
	cmd := exec.CommandContext(ctx, gobin, args...)
	// Stopped (Ctrl-C, a test's end), the go command is interrupted rather than killed: it removes
	// its work directory from the temporary directory; it is killed if still there after WaitDelay.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 15 * time.Second
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	return cmd
}

// stamp identifies a build; a binary is reused only when its stamp matches.
func (c component) stamp() string {
	st := c.name + "@" + c.version + " " + c.ldflags
	if c.tags != "" {
		st += " -tags " + c.tags
	}
	if c.post != nil {
		st += " +post"
	}
	if c.unoptimized {
		st += " -N -l"
	}
	return st
}

// Built reports whether every binary of the control plane is present and built from the pinned versions.
func (b *Builder) Built() bool {
	for _, c := range b.components() {
		if !c.optional && !b.upToDate(c) {
			return false
		}
	}
	return true
}

func (b *Builder) upToDate(c component) bool {
	st, err := os.ReadFile(filepath.Join(b.BinDir(), "."+c.name+".stamp"))
	if err != nil || string(st) != c.stamp() {
		return false
	}
	for bin := range c.packages {
		if _, err := os.Stat(b.Binary(bin)); err != nil {
			return false
		}
	}
	return true
}

// Build compiles whatever of the control plane is missing, and the named optional tools
// (prometheus, helm), printing progress to Out.
func (b *Builder) Build(ctx context.Context, tools ...string) error {
	comps, err := b.selected(tools)
	if err != nil {
		return err
	}
	return b.ensureAll(ctx, comps)
}

// selected is the control plane and the named optional tools, in the order components lists them.
func (b *Builder) selected(tools []string) ([]component, error) {
	if _, err := b.optional(tools); err != nil {
		return nil, err
	}
	var comps []component
	for _, c := range b.components() {
		if !c.optional || slices.Contains(tools, c.name) {
			comps = append(comps, c)
		}
	}
	return comps, nil
}

// BuildTools builds the named optional tools (prometheus, helm) when they are not cached, and
// not the control plane.
func (b *Builder) BuildTools(ctx context.Context, names ...string) error {
	opt, err := b.optional(names)
	if err != nil {
		return err
	}
	return b.ensureAll(ctx, opt)
}

func (b *Builder) optional(names []string) ([]component, error) {
	all := b.components()
	var out []component
	for _, name := range names {
		i := slices.IndexFunc(all, func(c component) bool { return c.name == name && c.optional })
		if i < 0 {
			return nil, fmt.Errorf("no optional tool %q (have: prometheus, helm)", name)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// lanes is how many components build at once. Each go build already compiles on every core, but
// it also waits on the module proxy and ends in a link that uses one core: a second build beside
// it fills those gaps.
const lanes = 2

// ensureAll builds the components that are not cached, lanes at a time, in the order given
// (components lists the largest first, so the longest build starts at once).
func (b *Builder) ensureAll(ctx context.Context, comps []component) error {
	if err := os.MkdirAll(b.BinDir(), 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	locked := *b
	locked.Out = &lockedWriter{w: b.Out}
	errs := make([]error, len(comps))
	free := make(chan struct{}, lanes)
	var wg sync.WaitGroup
	for i, c := range comps {
		free <- struct{}{}
		wg.Go(func() {
			defer func() { <-free }()
			errs[i] = locked.ensure(ctx, c)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lockedWriter keeps the lines of builds running side by side whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (b *Builder) ensure(ctx context.Context, c component) error {
	if b.upToDate(c) {
		fmt.Fprintf(b.Out, "[build] %s %s: cached\n", c.name, c.version)
		return nil
	}
	if err := b.build(ctx, c); err != nil {
		return fmt.Errorf("build %s: %w", c.name, err)
	}
	return nil
}

func (b *Builder) build(ctx context.Context, c component) error {
	start := time.Now()
	dir := filepath.Join(b.CacheDir, "src", c.name+"-"+c.version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mod, err := b.goModFor(ctx, c)
	if err != nil {
		return err
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, pkg := range c.packages {
		fmt.Fprintf(&tools, "\t_ %q\n", pkg)
	}
	tools.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tools.go"), []byte(tools.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b.Out, "[build] %s %s: resolving modules (first time only)\n", c.name, c.version)
	if err := b.run(ctx, c.name, b.goCmd(ctx, dir, "mod", "tidy")); err != nil {
		return fmt.Errorf("go mod tidy: %w", err)
	}
	if err := b.compile(ctx, c, dir); err != nil {
		return err
	}
	if c.post != nil {
		if err := c.post(ctx, dir); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(b.BinDir(), "."+c.name+".stamp"), []byte(c.stamp()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b.Out, "[build] %s %s: done in %s\n", c.name, c.version, time.Since(start).Round(time.Second))
	return nil
}

// compile builds every binary of c in one go build, so packages they share are compiled once and
// one binary links while another's packages compile. The binaries land in a scratch directory
// (named as go build names them: the package path's last element) and are moved into place.
func (b *Builder) compile(ctx context.Context, c component, dir string) error {
	// A directory of its own: a test beside a live make dev may build at the same moment.
	out, err := os.MkdirTemp(b.BinDir(), ".build-"+c.name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	// -s -w: no symbol table or DWARF (nobody debugs the tools), so the link, the one step of a
	// build that uses a single core, writes less. The stamp leaves them out: a cached binary
	// built with them is as good.
	args := []string{"build", "-v", "-o", out + string(filepath.Separator), "-ldflags", strings.TrimSpace("-s -w " + c.ldflags)}
	if c.tags != "" {
		args = append(args, "-tags", c.tags)
	}
	bins := slices.Sorted(maps.Keys(c.packages))
	var mains []string
	for _, bin := range bins {
		mains = append(mains, c.packages[bin])
	}
	if c.unoptimized {
		flags, err := b.unoptimizedFlags(ctx, c, dir, mains)
		if err != nil {
			return err
		}
		args = append(args, flags...)
	}
	args = append(args, mains...)
	fmt.Fprintf(b.Out, "[build] %s %s: compiling %s (a cold build takes minutes)\n", c.name, c.version, strings.Join(bins, ", "))
	if err := b.run(ctx, c.name, b.goCmd(ctx, dir, args...)); err != nil {
		return err
	}
	for bin, pkg := range c.packages {
		if err := os.Rename(filepath.Join(out, exeName(pkg)), b.Binary(bin)); err != nil {
			return fmt.Errorf("install %s: %w", bin, err)
		}
	}
	return nil
}

// exeName is the file go build writes for a main package: the last element of its path, or the
// one before a major-version suffix (go.etcd.io/etcd/server/v3 -> server).
func exeName(pkg string) string {
	base := path.Base(pkg)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return base
}

// run executes a go command, turning its per-package output into a periodic progress line.
func (b *Builder) run(ctx context.Context, label string, cmd *exec.Cmd) error {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var count atomic.Int64
	var tail bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "go: downloading"):
				count.Add(1)
			case strings.HasPrefix(line, "#") || strings.Contains(line, ": ") || strings.Contains(line, "error"):
				tail.WriteString(line + "\n")
			default:
				count.Add(1)
			}
		}
	}()
	start := time.Now()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			if err := cmd.Wait(); err != nil {
				return fmt.Errorf("%w\n%s", err, lastLines(tail.String(), 30))
			}
			return nil
		case <-tick.C:
			fmt.Fprintf(b.Out, "[build] %s: %d packages/modules so far, %s elapsed\n", label, count.Load(), time.Since(start).Round(time.Second))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DefaultCacheDir is $XDG_CACHE_HOME/devicewarden or ~/.cache/devicewarden.
func DefaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "devicewarden")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "devicewarden-cache")
	}
	return filepath.Join(home, ".cache", "devicewarden")
}
