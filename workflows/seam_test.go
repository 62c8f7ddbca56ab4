package workflows

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"testing"
)

// seam is what the device workflow may call of internal/decide: everything else it needs travels
// in the actions (decide.Plan) and the view (decide.View).
var seam = []string{"Start", "Step", "Prepare", "Accept", "Look"}

// TestDeviceWorkflowCallsOnlyTheSeam: the device workflow's files call no function of decide but
// the seam's, no method of its state, and write none of its fields.
func TestDeviceWorkflowCallsOnlyTheSeam(t *testing.T) {
	funcs, methods := decideDecls(t)
	if len(funcs) == 0 || len(methods) == 0 {
		t.Fatal("read no function or method of decide")
	}
	for _, name := range []string{"device.go", "execute.go", "repair.go", "followups.go", "migrate_start.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok {
				for _, lhs := range as.Lhs {
					if writesState(lhs) {
						t.Errorf("%s writes a field of the state: hand it to decide.Step as an event", name)
					}
				}
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "decide" {
				if funcs[sel.Sel.Name] && !slices.Contains(seam, sel.Sel.Name) {
					t.Errorf("%s calls decide.%s: go through the seam (%v)", name, sel.Sel.Name, seam)
				}
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "st" && methods[sel.Sel.Name] {
				t.Errorf("%s calls st.%s: go through the seam (%v)", name, sel.Sel.Name, seam)
			}
			return true
		})
	}
}

// writesState says whether an assignment's target is a field of the device's state (st.X, st.X.Y).
func writesState(e ast.Expr) bool {
	field := false
	for {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			e, field = x.X, true
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.Ident:
			return field && x.Name == "st"
		default:
			return false
		}
	}
}

// decideDecls are the package-level functions of internal/decide and the methods of its state.
func decideDecls(t *testing.T) (funcs, methods map[string]bool) {
	t.Helper()
	names, err := filepath.Glob("../internal/decide/*.go")
	if err != nil {
		t.Fatal(err)
	}
	funcs, methods = map[string]bool{}, map[string]bool{}
	for _, name := range names {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			if fd.Recv == nil {
				funcs[fd.Name.Name] = true
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "DeviceState" {
					methods[fd.Name.Name] = true
				}
			}
		}
	}
	return funcs, methods
}
