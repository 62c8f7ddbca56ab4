package layers

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/devicewarden/devicewarden/"

// layers lists every package, lowest first. A package imports only packages on lower layers.
var layers = [][]string{
	// Leaves: no package of this module.
	{"internal/device", "internal/capacity", "internal/ports", "internal/poll", "internal/buildinfo",
		"internal/imagecheck", "internal/casemut", "internal/layers", "internal/methodcount", "activities/activitytest",
		"internal/temporalchild"},
	// The policy file, and local infrastructure.
	{"internal/policy", "internal/metrics", "internal/localcluster", "internal/temporalserver"},
	// A fault's cause, and the step it chooses.
	{"internal/cause"},
	// The values a device workflow takes and answers, and a detector's report of a device.
	{"internal/devicemsg", "internal/healthreport"},
	// Pure decisions: a device's, and a rollout's.
	{"internal/decide", "internal/rolloutplan", "internal/temporalserver/temporaltest", "internal/promsignal"},
	// Pure decisions built on a device's: the breaker, migrations, node escalation; and what
	// DeviceWarden writes on objects and sends to people.
	{"internal/breaker", "internal/migrationplan", "internal/escalation", "internal/kubeobj", "internal/notify"},
	// Reads of the cluster that the activities and the CLI share.
	{"internal/capacitycheck", "internal/rolloutread"},
	// The workflow contract, and the simulated driver.
	{"api", "internal/sim"},
	// Side effects, and the parties that only talk to workflows through the contract.
	{"activities/devicehistory", "activities/hygiene", "activities/migration", "activities/remediation", "activities/rollouts",
		"internal/watcher", "internal/slackapp", "internal/console", "worker/permits"},
	{"workflows"},
	{"worker"},
	{"internal/app"},
	{"internal/bench"},
	{"internal/cli"},
	{"cmd/devicewarden"},
	// Test-only packages.
	{"internal/e2e", "activities/e2e"},
}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// listed is the module's packages, listed once for every test of this package.
var listed = sync.OnceValues(list)

// packages lists the module's packages with their imports, e2e-tagged files included.
func packages(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := listed()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func list() ([]pkg, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	cmd := exec.Command("go", "list", "-tags", "e2e", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	out, err = cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		return nil, fmt.Errorf("go list found %d packages", len(pkgs))
	}
	return pkgs, nil
}

func own(imports []string) []string {
	var out []string
	for _, i := range imports {
		if rest, ok := strings.CutPrefix(i, module); ok {
			out = append(out, rest)
		}
	}
	return out
}

// TestNoImportUpward: every package sits on a layer and imports only lower ones.
func TestNoImportUpward(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[p] = i
		}
	}
	for _, p := range packages(t) {
		mine, ok := layer[p.ImportPath]
		if !ok {
			t.Errorf("%s is on no layer: add it to layers in internal/layers", p.ImportPath)
			continue
		}
		for _, i := range own(p.Imports) {
			if l, ok := layer[i]; ok && l >= mine {
				t.Errorf("%s (layer %d) imports %s (layer %d)", p.ImportPath, mine, i, l)
			}
		}
	}
}

// implementation is the orchestration and its side effects: only they, and the worker that
// registers them, may import them.
func implementation(p string) bool {
	return p == "workflows" || strings.HasPrefix(p, "activities/")
}

// TestOnlyTheWorkerImportsTheImplementation: everything else reaches workflows through package
// api, tests included.
func TestOnlyTheWorkerImportsTheImplementation(t *testing.T) {
	for _, p := range packages(t) {
		if implementation(p.ImportPath) || p.ImportPath == "worker" {
			continue
		}
		seen := map[string]bool{}
		for _, i := range own(append(append(append([]string{}, p.Imports...), p.TestImports...), p.XTestImports...)) {
			if implementation(i) && !seen[i] {
				seen[i] = true
				t.Errorf("%s imports %s: use package api", p.ImportPath, i)
			}
		}
	}
}

// TestTheContractHoldsNoRuntime: package api is names, payloads and thin typed clients. A mutex,
// a goroutine or a cache belongs to the party that runs it (a worker's permit cache is
// worker/permits').
func TestTheContractHoldsNoRuntime(t *testing.T) {
	for _, p := range packages(t) {
		if p.ImportPath != "api" {
			continue
		}
		for _, i := range p.Imports {
			if i == "sync" || i == "sync/atomic" {
				t.Errorf("api imports %s: the contract holds no lock", i)
			}
		}
		for _, f := range sourceFiles(t, filepath.Join(moduleRoot(t), "api")) {
			ast.Inspect(f, func(n ast.Node) bool {
				if _, ok := n.(*ast.GoStmt); ok {
					t.Errorf("api starts a goroutine: the contract runs nothing")
				}
				return true
			})
		}
		return
	}
	t.Fatal("no package api")
}

// callers reach DeviceWarden's workflows as any client would: the watcher, the Slack app, the
// fleet page, the CLI and the benchmarks.
var callers = []string{"internal/watcher", "internal/slackapp", "internal/console", "internal/cli", "internal/bench"}

// TestCallersDoNotImportTheWorker: a caller runs no activity in process, past its workflow; what
// it shares with the activities is a plain library (internal/capacitycheck, internal/rolloutread).
func TestCallersDoNotImportTheWorker(t *testing.T) {
	isCaller := map[string]bool{}
	for _, c := range callers {
		isCaller[c] = true
	}
	for _, p := range packages(t) {
		if !isCaller[p.ImportPath] {
			continue
		}
		for _, i := range own(p.Imports) {
			if i == "worker" || strings.HasPrefix(i, "worker/") {
				t.Errorf("%s imports %s: reach the workflows through api, or share a plain library", p.ImportPath, i)
			}
		}
	}
}

// TestCallersDoNotImportTheDecisions: a caller, and the contract it speaks through (api), use
// package devicemsg's values (a device's view included), never decide's decisions or its state.
func TestCallersDoNotImportTheDecisions(t *testing.T) {
	seen := 0
	for _, p := range packages(t) {
		if !slices.Contains(callers, p.ImportPath) && p.ImportPath != "api" {
			continue
		}
		seen++
		if slices.Contains(own(p.Imports), "internal/decide") {
			t.Errorf("%s imports internal/decide: use internal/devicemsg's values and api", p.ImportPath)
		}
	}
	if seen != len(callers)+1 {
		t.Fatalf("read %d of the %d callers and api", seen, len(callers)+1)
	}
}

// pure are the decision packages: they do no I/O, so they import no Temporal and no Kubernetes client.
var pure = []string{"internal/device", "internal/capacity", "internal/policy", "internal/cause", "internal/decide", "internal/devicemsg", "internal/healthreport", "internal/promsignal", "internal/rolloutplan",
	"internal/breaker", "internal/migrationplan", "internal/escalation"}

// TestDecisionsDoNoIO: a pure package that imports a Temporal or Kubernetes client fails.
func TestDecisionsDoNoIO(t *testing.T) {
	byPath := map[string]pkg{}
	for _, p := range packages(t) {
		byPath[p.ImportPath] = p
	}
	for _, name := range pure {
		p, ok := byPath[name]
		if !ok {
			t.Errorf("%s: no such package", name)
			continue
		}
		for _, i := range p.Imports {
			if strings.HasPrefix(i, "go.temporal.io/") || strings.HasPrefix(i, "k8s.io/client-go") {
				t.Errorf("%s imports %s: decisions do no I/O", name, i)
			}
		}
	}
}
