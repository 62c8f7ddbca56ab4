package buildinfo

import (
	"runtime"
	"testing"
)

func TestInfoString(t *testing.T) {
	i := Info{Version: "v0.3.0", Flavour: "lean", Revision: "abc123", Modified: true, GoVersion: "go1.26.8"}
	if got := i.String(); got != "devicewarden v0.3.0 lean (abc123+dirty, go1.26.8)" {
		t.Fatalf("String = %q", got)
	}
	i.Modified = false
	if got := i.String(); got != "devicewarden v0.3.0 lean (abc123, go1.26.8)" {
		t.Fatalf("String = %q", got)
	}
	if r := Read(); r.Version != Version || r.Flavour != Flavour || r.GoVersion != runtime.Version() || r.Revision == "" {
		t.Fatalf("Read = %+v", r)
	}
}
