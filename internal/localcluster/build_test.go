package localcluster

import (
	"slices"
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
	if _, err := b.selected([]string{"grafana"}); err == nil {
		t.Error("an unknown tool was accepted")
	}
}
