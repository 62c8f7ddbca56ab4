package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestStaticlintRunsVetsSuite: `make lint` stands in for go vet, so internal/staticlint runs every
// analyzer of cmd/vet's suite in the Go that builds the project, and no other under vet's name.
func TestStaticlintRunsVetsSuite(t *testing.T) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	goVet := analyzerList(t, filepath.Join(strings.TrimSpace(string(out)), "src", "cmd", "vet", "main.go"), "suite")
	ours := analyzerList(t, filepath.Join(moduleRoot(t), "internal", "staticlint", "main.go"), "vet")
	if len(goVet) < 30 {
		t.Fatalf("cmd/vet's suite has %d analyzers: has its source moved?", len(goVet))
	}
	for _, name := range goVet {
		if !slices.Contains(ours, name) {
			t.Errorf("go vet runs %s and staticlint does not: add it to internal/staticlint/main.go", name)
		}
	}
	for _, name := range ours {
		if !slices.Contains(goVet, name) {
			t.Errorf("staticlint runs %s under vet's name, which go vet does not", name)
		}
	}
}

// analyzerList reads the package names of the analyzers in the slice literal assigned to name
// (`var suite = []*analysis.Analyzer{printf.Analyzer, ...}`).
func analyzerList(t *testing.T, file, name string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || spec.Names[0].Name != name || len(spec.Values) != 1 {
			return true
		}
		lit, ok := spec.Values[0].(*ast.CompositeLit)
		if !ok {
			t.Fatalf("%s: %s is not a slice literal", file, name)
		}
		for _, e := range lit.Elts {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok {
				t.Fatalf("%s: an element of %s is not pkg.Analyzer", file, name)
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && sel.Sel.Name == "Analyzer" {
				list = append(list, pkg.Name)
			}
		}
		return false
	})
	if list == nil {
		t.Fatalf("%s: no analyzer list named %s", file, name)
	}
	return list
}
