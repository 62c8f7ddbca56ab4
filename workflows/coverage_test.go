package workflows

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/migrationplan"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/rolloutplan"
)

// TestReplayCoversEveryPath fails when a workflow gains a path that no recorded history takes, so
// TestReplay could not notice a change to it. A path is, per workflow type: each signal and update
// the workflow registers (read from the running workflow's metadata), each activity its code can
// call, a fired timer and a continue-as-new when its code has them, each GetVersion change, and for
// the device workflow each state of internal/devicemsg. It also fails when a history holds a version
// marker no GetVersion reads any more: the replayer skips such a marker silently, so removing a
// GetVersion while runs from before it are open would go unnoticed.
func TestReplayCoversEveryPath(t *testing.T) {
	want := expectedPaths(t)
	have, markers := recordedPaths(t)
	var missing []string
	for wf, paths := range want {
		for p := range paths {
			if !have[wf][p] {
				missing = append(missing, wf+" "+p)
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("no recorded history takes %s: record one (DEVICEWARDEN_RECORD_HISTORY=$PWD/workflows/testdata go test -tags e2e ./internal/e2e/)", m)
	}
	for wf, ids := range markers {
		for id, file := range ids {
			if !want[wf]["version "+id] {
				t.Errorf("%s records version %q but %s no longer reads it: keep the GetVersion while such runs may be open", file, id, wf)
			}
		}
	}
}

// activityVars are the names workflows reach activities by: each domain's (activities.go) and the
// older single one.
var activityVars = map[string]bool{"a": true, "rem": true, "mig": true, "rol": true, "hyg": true, "his": true}

// expectedPaths lists the paths each workflow type has, from its metadata and its source.
func expectedPaths(t *testing.T) map[string]map[string]bool {
	t.Helper()
	code := sourcePaths(t)
	want := map[string]map[string]bool{}
	for name, fn := range All {
		paths := map[string]bool{}
		for _, p := range handlerPaths(t, fn) {
			paths[p] = true
		}
		for p := range code[name] {
			paths[p] = true
		}
		want[name] = paths
	}
	for _, s := range deviceStates(t) {
		want["DeviceWorkflow"]["state "+s] = true
	}
	return want
}

// handlerPaths starts the workflow in the test environment and reads the signals and updates it
// registered from its built-in metadata query.
func handlerPaths(t *testing.T, fn any) []string {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	var paths []string
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow("__temporal_workflow_metadata")
		if err != nil {
			t.Fatalf("metadata query: %v", err)
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Fatal(err)
		}
		for _, d := range md.GetDefinition().GetSignalDefinitions() {
			paths = append(paths, "signal "+d.GetName())
		}
		for _, d := range md.GetDefinition().GetUpdateDefinitions() {
			paths = append(paths, "update "+d.GetName())
		}
		env.CancelWorkflow()
	}, time.Millisecond)
	switch f := fn.(type) {
	case func(workflow.Context, api.DeviceInput) error:
		env.ExecuteWorkflow(f, api.DeviceInput{Device: gpu0, Node: gpu0.Pool, Policy: policy.Default()})
	case func(workflow.Context, api.BreakerInput) error:
		env.ExecuteWorkflow(f, api.BreakerInput{})
	case func(workflow.Context, api.NodeInput) error:
		env.ExecuteWorkflow(f, api.NodeInput{Node: "node-1"})
	case func(workflow.Context, api.LimiterInput) error:
		env.ExecuteWorkflow(f, api.LimiterInput{})
	case func(workflow.Context, api.MigrateInput) (migrationplan.MigrationState, error):
		registerActivities(env)
		env.OnActivity("TakeMigrationLease", mock.Anything, mock.Anything).Return(migration.LeaseResult{Held: true}, nil).Maybe()
		for _, name := range []string{"HoldMigrationLease", "RequestMigrationSlot", "ReleaseMigrationLease"} {
			env.OnActivity(name, mock.Anything, mock.Anything).Return(nil).Maybe()
		}
		env.OnActivity("RecordMigration", mock.Anything, mock.Anything).Return(nil).Maybe()
		env.OnActivity("Alert", mock.Anything, mock.Anything).Return(nil).Maybe()
		env.ExecuteWorkflow(f, api.MigrateInput{Device: gpu0, Node: "node-1"})
	case func(workflow.Context, api.RolloutInput) (api.RolloutStatus, error):
		registerActivities(env)
		env.OnActivity("RolloutPreflight", mock.Anything, mock.Anything).Return([]rolloutplan.Violation{{Node: "n"}}, nil).Maybe()
		env.ExecuteWorkflow(f, api.RolloutInput{Plan: testPlan()})
	case func(workflow.Context, api.RolloutWindowInput) (api.OpenWindowResult, error):
		return nil // a schedule's action: it takes no signal or update
	case func(workflow.Context, api.ClaimHygieneInput) (api.ClaimHygieneStatus, error):
		return nil // it looks again on its own timer: no signal or update
	default:
		t.Fatalf("unknown workflow function %T", fn)
	}
	if len(paths) == 0 {
		t.Fatalf("%T registered no signal or update", fn)
	}
	return paths
}

// sourcePaths reads the package's source: for each workflow function, everything it reaches
// through calls within the package; there, each activity named as a.<Method>, a timer, a
// continue-as-new and each GetVersion change ID.
func sourcePaths(t *testing.T) map[string]map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]*ast.BlockStmt{} // function or method name -> bodies
	consts := map[string]string{}           // package-level string constants, for change IDs
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				bodies[fd.Name.Name] = append(bodies[fd.Name.Name], fd.Body)
			}
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[n.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
	}
	out := map[string]map[string]bool{}
	for name := range All {
		paths := map[string]bool{}
		seen := map[string]bool{}
		var visit func(string)
		visit = func(fn string) {
			if seen[fn] {
				return
			}
			seen[fn] = true
			for _, body := range bodies[fn] {
				ast.Inspect(body, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.SelectorExpr:
						if x, ok := n.X.(*ast.Ident); ok && activityVars[x.Name] {
							paths["activity "+n.Sel.Name] = true
						}
						if x, ok := n.X.(*ast.Ident); ok && x.Name == "workflow" {
							switch n.Sel.Name {
							case "NewTimer", "Sleep", "AwaitWithTimeout":
								paths["timer fired"] = true
							case "NewContinueAsNewError":
								paths["continue-as-new"] = true
							}
						}
						if _, ok := bodies[n.Sel.Name]; ok {
							visit(n.Sel.Name) // a method of a package type
						}
					case *ast.CallExpr:
						if id, ok := n.Fun.(*ast.Ident); ok {
							visit(id.Name)
						}
						// A change is read by workflow.GetVersion, or by changed(ctx, id) (changes.go),
						// named by a literal or a package constant.
						sel, isSel := n.Fun.(*ast.SelectorExpr)
						callee, isIdent := n.Fun.(*ast.Ident)
						// changed's own GetVersion reads what its callers name.
						if fn != "changed" && (isSel && sel.Sel.Name == "GetVersion" || isIdent && callee.Name == "changed") && len(n.Args) > 1 {
							switch arg := n.Args[1].(type) {
							case *ast.BasicLit:
								id, _ := strconv.Unquote(arg.Value)
								paths["version "+id] = true
							case *ast.Ident:
								if id, ok := consts[arg.Name]; ok {
									paths["version "+id] = true
								} else {
									t.Errorf("GetVersion at %s: change ID %s is no string constant", fset.Position(n.Pos()), arg.Name)
								}
							default:
								if !(isIdent && callee.Name == "changed") {
									t.Errorf("GetVersion at %s: change ID is not a literal", fset.Position(n.Pos()))
								}
							}
						}
					}
					return true
				})
			}
		}
		if _, ok := bodies[name]; !ok {
			t.Errorf("workflow type %s is not a function of this package: name it after its function", name)
		}
		visit(name)
		out[name] = paths
	}
	return out
}

// deviceStates reads the State constants from internal/decide.
func deviceStates(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "internal", "devicemsg", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "State" {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						states = append(states, s)
					}
				}
			}
		}
	}
	if len(states) < 6 {
		t.Fatalf("found device states %v in internal/devicemsg", states)
	}
	return states
}

// recordedPaths reads every recorded history: the paths each workflow type took, and the version
// markers each holds (change ID -> a file holding it).
func recordedPaths(t *testing.T) (map[string]map[string]bool, map[string]map[string]string) {
	t.Helper()
	files := histories(t)
	have := map[string]map[string]bool{}
	markers := map[string]map[string]string{}
	for _, f := range files {
		h, err := readHistory(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if have[h.workflowType] == nil {
			have[h.workflowType], markers[h.workflowType] = map[string]bool{}, map[string]string{}
		}
		for p := range h.paths {
			have[h.workflowType][p] = true
		}
		for p := range h.paths {
			if id, ok := strings.CutPrefix(p, "version "); ok {
				markers[h.workflowType][id] = filepath.Base(f)
			}
		}
	}
	for wf := range All {
		if have[wf] == nil {
			t.Errorf("no recorded history of %s", wf)
		}
	}
	return have, markers
}
