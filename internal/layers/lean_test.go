package layers

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fullOnlyPkgs is the Makefile's list of the packages `make lint` reads with go vet as the full
// build compiles them: staticlint reads every package as the lean build compiles it, so what the
// lean build leaves out is checked only where that list names it.
var fullOnlyPkgs = regexp.MustCompile(`(?m)^FULL_ONLY_PKGS = (.+)$`)

// TestFullOnlyFilesAreVetted: every file the lean build leaves out (a `//go:build !lean`
// constraint, the e2e tests' aside) lives in a package that `make lint`'s go vet pass names, and
// that list names no package without one.
func TestFullOnlyFilesAreVetted(t *testing.T) {
	root := moduleRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := fullOnlyPkgs.FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no FULL_ONLY_PKGS line")
	}
	vetted := map[string]bool{}
	for _, p := range strings.Fields(string(m[1])) {
		vetted[strings.Trim(strings.TrimPrefix(p, "./"), "/")] = false
	}
	found := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !fullOnly(string(data)) {
			return nil
		}
		found++
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		if _, ok := vetted[filepath.ToSlash(rel)]; !ok {
			t.Errorf("%s: left out of the lean build, in a package FULL_ONLY_PKGS does not name: `make lint` would not read it", filepath.Join(rel, d.Name()))
			return nil
		}
		vetted[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no file left out of the lean build: has the lean build's tag changed?")
	}
	for pkg, has := range vetted {
		// internal/temporalserver and cmd/devicewarden differ by what they import, not by a tag.
		if !has && pkg != "internal/temporalserver" && pkg != "cmd/devicewarden" {
			t.Errorf("FULL_ONLY_PKGS names %s, which has no file left out of the lean build", pkg)
		}
	}
}

// fullOnly says whether a file's build constraint leaves it out of the lean build.
func fullOnly(src string) bool {
	for line := range strings.Lines(src) {
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if c, ok := strings.CutPrefix(line, "//go:build "); ok {
			return strings.Contains(c, "!lean")
		}
	}
	return false
}
