// Command casemut tests the mutants gremlins reports as NOT COVERED.
//
// gremlins counts a mutant as covered only when it falls inside a block of Go's coverage
// profile, and those blocks leave out the case expressions of a tagless switch and constant
// declarations, so it never runs the tests against those mutants. casemut reads gremlins'
// `unleash --dry-run` output on stdin, applies each NOT COVERED mutant in turn through
// `go test -overlay` (the source tree is never written), runs the package's tests and prints
// KILLED or LIVED per mutant and the totals.
//
//	gremlins unleash --dry-run ./internal/decide | go run ./internal/casemut ./internal/decide
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

var notCovered = regexp.MustCompile(`NOT COVERED (\w+) at (\S+\.go):(\d+):(\d+)`)

// flips holds, per gremlins mutator, the operator each one turns a token into.
var flips = map[string]map[token.Token]token.Token{
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ,
		token.GTR: token.LEQ, token.LEQ: token.GTR, token.GEQ: token.LSS},
	"CONDITIONALS_BOUNDARY": {token.LSS: token.LEQ, token.GTR: token.GEQ, token.LEQ: token.LSS, token.GEQ: token.GTR},
	"ARITHMETIC_BASE": {token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO,
		token.QUO: token.MUL, token.REM: token.MUL},
	"INCREMENT_DECREMENT": {token.INC: token.DEC, token.DEC: token.INC},
}

type mutant struct {
	mutator, file string
	line, col     int
}

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "how long one test run may take before the mutant counts as timed out")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gremlins unleash --dry-run ./pkg | casemut [-timeout d] ./pkg")
		os.Exit(2)
	}
	pkg := flag.Arg(0)
	var ms []mutant
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if m := notCovered.FindStringSubmatch(sc.Text()); m != nil {
			line, _ := strconv.Atoi(m[3])
			col, _ := strconv.Atoi(m[4])
			ms = append(ms, mutant{mutator: m[1], file: filepath.Join(pkg, m[2]), line: line, col: col})
		}
	}
	counts := map[string]int{}
	for _, m := range ms {
		verdict, err := run(m, pkg, *timeout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "casemut: %s at %s:%d:%d: %v\n", m.mutator, m.file, m.line, m.col, err)
			os.Exit(1)
		}
		counts[verdict]++
		fmt.Printf("%-9s %s at %s:%d:%d\n", verdict, m.mutator, filepath.Base(m.file), m.line, m.col)
	}
	fmt.Printf("not-covered mutants run: %d, killed %d, lived %d, timed out %d\n",
		len(ms), counts["KILLED"], counts["LIVED"], counts["TIMED OUT"])
}

// run applies one mutant through an overlay and runs the package's tests.
func run(m mutant, pkg string, timeout time.Duration) (string, error) {
	src, err := os.ReadFile(m.file)
	if err != nil {
		return "", err
	}
	mutated, err := apply(src, m)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "casemut-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	abs, err := filepath.Abs(m.file)
	if err != nil {
		return "", err
	}
	replaced := filepath.Join(dir, filepath.Base(m.file))
	if err := os.WriteFile(replaced, mutated, 0o600); err != nil {
		return "", err
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: replaced}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "test", "-count=1", "-failfast", "-overlay", overlayFile,
		"-timeout", timeout.String(), "./"+filepath.Clean(pkg))
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		return "LIVED", nil
	case regexp.MustCompile(`panic: test timed out`).Match(out):
		return "TIMED OUT", nil
	default:
		return "KILLED", nil
	}
}

// apply returns src with the operator at m's line and column replaced by its mutation.
func apply(src []byte, m mutant) ([]byte, error) {
	fset := token.NewFileSet()
	file := fset.AddFile(m.file, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, 0)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return nil, fmt.Errorf("no operator at that position")
		}
		p := fset.Position(pos)
		if p.Line != m.line || p.Column != m.col {
			continue
		}
		to, ok := flips[m.mutator][tok]
		if !ok {
			return nil, fmt.Errorf("%s does not apply to %q", m.mutator, tok)
		}
		off := file.Offset(pos)
		out := append([]byte{}, src[:off]...)
		out = append(out, to.String()...)
		return append(out, src[off+len(tok.String()):]...), nil
	}
}
