package buildinfo

import (
	"os/exec"
	"strings"
	"testing"
)

// left out of the lean build: the embedded Temporal server and its UI, and the one-machine code.
var leftOut = []string{
	"go.temporal.io/server/",
	"github.com/temporalio/ui-server/",
	"github.com/devicewarden/devicewarden/internal/temporalserver",
	"github.com/devicewarden/devicewarden/internal/localcluster",
	"github.com/devicewarden/devicewarden/internal/sim",
	"github.com/devicewarden/devicewarden/internal/bench",
}

func deps(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-tags", tags, "../../cmd/devicewarden").Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q: %v", tags, err)
	}
	return strings.Fields(string(out))
}

func linked(pkgs []string, prefix string) []string {
	var hits []string
	for _, p := range pkgs {
		if strings.HasPrefix(p+"/", prefix) || strings.HasPrefix(p, prefix) {
			hits = append(hits, p)
		}
	}
	return hits
}

// The lean build (tag lean, make build-lean, the image) links none of them; the full build links
// every one, so the test knows the names it looks for.
func TestLeanBuildLeavesOutTheServerAndTheLocalTools(t *testing.T) {
	full, lean := deps(t, ""), deps(t, "lean")
	for _, prefix := range leftOut {
		if len(linked(full, prefix)) == 0 {
			t.Errorf("the full build does not link %s: the name is stale", prefix)
		}
		if hits := linked(lean, prefix); len(hits) > 0 {
			t.Errorf("the lean build links %d packages of %s, first %s", len(hits), prefix, hits[0])
		}
	}
	if len(linked(lean, "go.temporal.io/sdk/")) == 0 || len(linked(lean, "k8s.io/client-go/")) == 0 {
		t.Fatal("the lean build lost the Temporal SDK or client-go")
	}
}
