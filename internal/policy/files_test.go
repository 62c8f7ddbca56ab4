package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyFiles(t *testing.T) {
	if p := DefaultSet().For("any.class", "any.driver"); p.Name != "default" || p.QuarantineLease != Default().QuarantineLease {
		t.Fatalf("default set gave %+v", p)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read policy file") {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  - name: x\n    toleranceWindow: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), "policy file "+bad) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad file: %v", err)
	}
}
