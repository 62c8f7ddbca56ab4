package methodcount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Methods are counted per type, by value or pointer receiver alike; functions and test files
// are not.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.go":      "package p\ntype A struct{}\ntype B int\nfunc (A) x() {}\nfunc (a *A) y() {}\nfunc (b B) z() {}\nfunc f() {}\n",
		"b.go":      "package p\nfunc (a *A) w() {}\n",
		"a_test.go": "package p\nfunc (A) t() {}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Of(dir)
	if err != nil || m["A"] != 3 || m["B"] != 1 || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	wrong, err := Over(dir, 2, "A", "C")
	if err != nil || !slices.Equal(wrong, []string{"A has 3 methods, more than 2: split it by concept", "read no method of C"}) {
		t.Fatalf("over: %q %v", wrong, err)
	}
	if wrong, _ := Over(dir, 3, "A", "B"); len(wrong) != 0 {
		t.Fatalf("within the bound: %q", wrong)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.go"), []byte("package p\nfunc ("), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Of(dir); err == nil {
		t.Fatal("a file that does not parse counted")
	}
}
