package layers

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// leanLines is the most a non-test file built only with the lean tag may hold. `make lint` reads
// every package without the lean tag and only the four that differ with it (a pass over all of them
// would analyse every dependency again: BENCHMARKS.md), so the code only the lean build compiles
// must stay a choice between code both builds compile.
const leanLines = 16

// TestLeanOnlyFilesOnlyChoose: every file under a `//go:build lean` constraint is short enough to
// be a choice (a constant, a one-line function), so the full pass has read whatever it chooses.
func TestLeanOnlyFilesOnlyChoose(t *testing.T) {
	root := moduleRoot(t)
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !leanOnly(string(data)) {
			return nil
		}
		found++
		if n := strings.Count(string(data), "\n"); n > leanLines {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: %d lines under the lean tag alone (at most %d): move the code into a file both builds compile, which `make lint` reads", rel, n, leanLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no lean-only file found: has the lean build's tag changed?")
	}
}

// leanOnly says whether a file's build constraint requires the lean tag.
func leanOnly(src string) bool {
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if c, ok := strings.CutPrefix(line, "//go:build "); ok {
			return strings.TrimSpace(c) == "lean"
		}
	}
	return false
}
