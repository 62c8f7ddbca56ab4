package localcluster

import (
	"context"
	"maps"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func TestExeName(t *testing.T) {
	for pkg, want := range map[string]string{
		"k8s.io/kubernetes/cmd/kube-apiserver":            "kube-apiserver",
		"go.etcd.io/etcd/server/v3":                       "server",
		"github.com/prometheus/prometheus/cmd/prometheus": "prometheus",
		"example.com/tools/vet":                           "vet",
	} {
		if got := exeName(pkg); got != want {
			t.Errorf("exeName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

// A stamp changes with the build tags, so a binary built without them is rebuilt.
func TestStampCarriesTheTags(t *testing.T) {
	c := component{name: "prometheus", version: "v1"}
	plain := c.stamp()
	c.tags = "remove_all_sd"
	if c.stamp() == plain {
		t.Fatalf("stamp %q ignores the tags", plain)
	}
}

// The longest build starts first, and a named tool builds beside the control plane, not after it.
func TestBuildSelectsLargestFirst(t *testing.T) {
	b := &Builder{}
	names := func(tools ...string) []string {
		comps, err := b.selected(tools)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range comps {
			out = append(out, c.name)
		}
		return out
	}
	if got, want := names(), []string{"kubernetes", "temporal-cli", "kwok", "etcd"}; !slices.Equal(got, want) {
		t.Errorf("control plane: %v, want %v", got, want)
	}
	if got, want := names("prometheus"), []string{"kubernetes", "temporal-cli", "prometheus", "kwok", "etcd"}; !slices.Equal(got, want) {
		t.Errorf("with prometheus: %v, want %v", got, want)
	}
	if got, want := names("helm", "prometheus"), []string{"kubernetes", "temporal-cli", "prometheus", "helm", "kwok", "etcd"}; !slices.Equal(got, want) {
		t.Errorf("with helm and prometheus: %v, want %v", got, want)
	}
	if _, err := b.selected([]string{"grafana"}); err == nil {
		t.Error("an unknown tool was accepted")
	}
}

// A component that takes floors requires the project's versions; one that does not is left alone.
func TestFloorsAreRequiredWhereTaken(t *testing.T) {
	b := &Builder{Floors: map[string]string{"k8s.io/api": "v0.37.2", "google.golang.org/grpc": "v1.83.2"}}
	base := "module devicewarden.local/x\n\ngo 1.26\n\nrequire example.com/tool v1.0.0\n"
	c := component{name: "tool", goMod: func(context.Context) (string, error) { return base, nil }}
	mod, err := b.goModFor(context.Background(), c)
	if err != nil || mod != base {
		t.Fatalf("without floors: %q, %v; want the tool's own go.mod", mod, err)
	}
	c.floors = true
	mod, err = b.goModFor(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	want := base + "\n// The project's module versions, as floors (shared compiles).\nrequire (\n" +
		"\tgoogle.golang.org/grpc v1.83.2\n\tk8s.io/api v0.37.2\n)\n"
	if mod != want {
		t.Errorf("with floors:\n%s\nwant:\n%s", mod, want)
	}
	c.ownModules = []string{"google.golang.org/"}
	mod, err = b.goModFor(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mod, "grpc") || !strings.Contains(mod, "\tk8s.io/api v0.37.2\n") {
		t.Errorf("with grpc the tool's own:\n%s", mod)
	}
}

// With no floors given, the builder takes the running binary's modules, each at its version; a
// replaced module's version is not the module's, so it is no floor.
func TestFloorsAreTheBinarysModules(t *testing.T) {
	info := &debug.BuildInfo{Deps: []*debug.Module{
		{Path: "k8s.io/api", Version: "v0.37.2"},
		{Path: "example.com/forked", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v9.0.0"}},
		{Path: "example.com/local", Version: "(devel)"},
	}}
	if got, want := modulesOf(info), map[string]string{"k8s.io/api": "v0.37.2"}; !maps.Equal(got, want) {
		t.Errorf("floors %v, want %v", got, want)
	}
	if got := modulesOf(nil); len(got) != 0 {
		t.Errorf("no build info gave floors %v", got)
	}
}

// The components checked to build at the project's versions take them; the temporal CLI keeps
// its own Temporal modules (its server does not compile against the project's). The stock
// Temporal server is the one the project embeds.
func TestWhichComponentsTakeFloors(t *testing.T) {
	got := map[string]bool{}
	for _, c := range (&Builder{}).components() {
		got[c.name] = c.floors
		if c.name == "temporal-cli" && !slices.Contains(c.ownModules, "go.temporal.io/") {
			t.Errorf("the temporal CLI takes the project's Temporal modules: %v", c.ownModules)
		}
	}
	want := map[string]bool{"kubernetes": true, "kwok": true, "etcd": true, "prometheus": true, "helm": true, "temporal-cli": true, "temporal-server": true}
	if !maps.Equal(got, want) {
		t.Errorf("floors taken: %v, want %v", got, want)
	}
}

// The stock Temporal server the PostgreSQL stack runs is the version the project embeds (its
// go.mod): at the project's floors it compiles nothing of the server again.
func TestTheStockServerIsTheEmbeddedOne(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.temporal\.io/server (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no go.temporal.io/server")
	}
	if string(m[1]) != TemporalServerVersion {
		t.Fatalf("the stock server is %s, the project embeds %s", TemporalServerVersion, m[1])
	}
}
