//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// lengthsFile holds the slot time of each test beside the in-turn line, as a past run measured
// it: one "seconds name" line per test. The scheduler starts the longest first. A run with
// DEVICEWARDEN_E2E_LENGTHS set to a file writes its own figures there, merged into the file's:
//
//	DEVICEWARDEN_E2E_LENGTHS=$PWD/internal/e2e/testdata/lengths.txt make test-e2e
const lengthsFile = "testdata/lengths.txt"

// readLengths reads a lengths file; a missing file is no lengths.
func readLengths(path string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		secs, name, ok := strings.Cut(line, " ")
		s, err := strconv.Atoi(secs)
		if !ok || err != nil || s < 0 || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("%s:%d: %q: want \"seconds TestName\"", path, n, line)
		}
		out[strings.TrimSpace(name)] = time.Duration(s) * time.Second
	}
	return out, sc.Err()
}

// writeLengths writes the figures of this run's tests beside the line into path, keeping the
// file's figures of the tests that did not run.
func writeLengths(path string, tl *timeline) error {
	all, err := readLengths(path)
	if err != nil {
		return err
	}
	tl.mu.Lock()
	for _, s := range tl.spans {
		if s.kind != "in turn" {
			all[s.name] = (s.to - s.from).Round(time.Second)
		}
	}
	tl.mu.Unlock()
	var b strings.Builder
	b.WriteString("# Slot seconds of the e2e tests beside the in-turn line, as a run measured them; the\n")
	b.WriteString("# scheduler starts the longest first (lengths_test.go says how to refresh them).\n")
	for _, name := range slices.Sorted(maps.Keys(all)) {
		fmt.Fprintf(&b, "%d %s\n", int(all[name].Seconds()), name)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
