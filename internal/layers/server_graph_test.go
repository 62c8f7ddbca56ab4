package layers

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serverModule is the Temporal server's module: the embedded server links it, and nothing else may.
const serverModule = "go.temporal.io/server"

// TestOnlyTheEmbeddedServerLinksTheServer: built as the race detector's unit run builds them
// (build tag lean, tests included), no package outside internal/temporalserver depends on the
// Temporal server. The server's graph (about a thousand packages, the cloud SDKs of its archival
// included) compiled with the race detector was a third of a cold make check; a test that needs
// a real server starts it as a child process (internal/temporalserver/temporaltest).
func TestOnlyTheEmbeddedServerLinksTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the module's dependency graph")
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-tags", "lean", "-test", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		path, deps, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(path, module+"internal/temporalserver") {
			continue
		}
		checked++
		for dep := range strings.FieldsSeq(deps) {
			if dep == serverModule || strings.HasPrefix(dep, serverModule+"/") {
				t.Errorf("%s depends on %s: the race run would compile the Temporal server", path, dep)
				break
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list gave %d packages", checked)
	}
}
