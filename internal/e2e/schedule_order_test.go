//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func started(ready <-chan struct{}) bool {
	select {
	case <-ready:
		return true
	default:
		return false
	}
}

// TestSchedulerStartsTheLongestFirst: the tests beside the in-turn line start once all came, the
// longest first (an unmeasured one counts as long), and a test beside others only once the line
// is done.
func TestSchedulerStartsTheLongestFirst(t *testing.T) {
	s := newScheduler(3)
	s.lengths = map[string]time.Duration{"short": 10 * time.Second, "long": 200 * time.Second, "beside": 300 * time.Second}
	s.left = 1 // one in-turn test is left: it holds a slot, and keeps the test beside others waiting
	length := map[string]time.Duration{}
	for _, name := range []string{"short", "new", "long", "beside"} {
		length[name] = s.register(name)
	}
	short := s.arrive(false, length["short"])
	fresh := s.arrive(false, length["new"])
	long := s.arrive(false, length["long"])
	if started(short) || started(fresh) || started(long) {
		t.Fatal("a test started before every registered test came")
	}
	beside := s.arrive(true, length["beside"])
	if !started(long) || !started(fresh) || started(short) || started(beside) {
		t.Fatalf("two free slots: want long and the unmeasured one started; started long %v, new %v, short %v, beside %v",
			started(long), started(fresh), started(short), started(beside))
	}
	s.mu.Lock()
	s.left-- // the line is done, as inTurn's cleanup says
	s.admit()
	s.mu.Unlock()
	if !started(beside) || started(short) {
		t.Fatalf("the line's slot freed: want the longest waiting (beside others) started; beside %v, short %v", started(beside), started(short))
	}
	s.done()
	if !started(short) {
		t.Fatal("a slot given back: want the last test started")
	}
}

// TestBrokenLengthsFileIsRefused: a lengths file line that is not "seconds name" is an error that
// names the line; a missing file is no lengths.
func TestBrokenLengthsFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	got, err := readLengths(filepath.Join(dir, "none.txt"))
	if err != nil || len(got) != 0 {
		t.Fatalf("missing file: got %v, %v; want no lengths", got, err)
	}
	for _, line := range []string{"TestA 12", "-3 TestA", "12", "twelve TestA"} {
		path := filepath.Join(dir, "lengths.txt")
		if err := os.WriteFile(path, []byte("# ok\n40 TestB\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readLengths(path); err == nil || !strings.Contains(err.Error(), ":3:") {
			t.Errorf("line %q: got %v, want an error naming line 3", line, err)
		}
	}
	path := filepath.Join(dir, "good.txt")
	if err := os.WriteFile(path, []byte("# c\n\n40 TestB\n7 TestC\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = readLengths(path)
	if err != nil || got["TestB"] != 40*time.Second || got["TestC"] != 7*time.Second || len(got) != 2 {
		t.Fatalf("got %v, %v", got, err)
	}
}
