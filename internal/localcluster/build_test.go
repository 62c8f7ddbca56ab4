package localcluster

import "testing"

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
