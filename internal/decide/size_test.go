package decide

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods bounds a type of this package: a type that grows past it is split by concept (the
// fence, the review, the ladder, the unit), each over the same state.
const maxMethods = 25

// TestNoTypeHasMoreThanItsShare counts the methods declared on each type of the package.
func TestNoTypeHasMoreThanItsShare(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]int{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
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
	if methods["DeviceState"] == 0 {
		t.Fatal("read no method of DeviceState")
	}
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("%s has %d methods, more than %d: split it by concept", typ, n, maxMethods)
		}
	}
}
