// Package methodcount counts the methods declared on each type of a package's non-test files:
// the packages whose types grew large hold each type to a bound with it, in a test.
package methodcount

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Of returns, for the Go package in dir, how many methods each type declares (its test files
// left out).
func Of(dir string) (map[string]int, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	methods := map[string]int{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			typ := fd.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				methods[id.Name]++
			}
		}
	}
	return methods, nil
}

// Over says what is wrong with the package in dir: each type with more than max methods, or
// none of the types named in known counted (the count read nothing).
func Over(dir string, max int, known ...string) ([]string, error) {
	methods, err := Of(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range known {
		if methods[k] == 0 {
			out = append(out, fmt.Sprintf("read no method of %s", k))
		}
	}
	for typ, n := range methods {
		if n > max {
			out = append(out, fmt.Sprintf("%s has %d methods, more than %d: split it by concept", typ, n, max))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Bound fails t with what Over finds.
func Bound(t testing.TB, dir string, max int, known ...string) {
	t.Helper()
	wrong, err := Over(dir, max, known...)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wrong {
		t.Error(w)
	}
}
