package localcluster

import (
	"slices"
	"testing"
)

// A tool's own packages are those of modules the project does not build at the same version;
// the rest keep the project's flags, so they come from the build cache.
func TestOwnPackageFlags(t *testing.T) {
	list := []byte(`go.temporal.io/server/common go.temporal.io/server v1.29.1
google.golang.org/grpc google.golang.org/grpc v1.80.0
google.golang.org/grpc/codes google.golang.org/grpc v1.80.0
github.com/temporalio/cli/cmd/temporal github.com/temporalio/cli v1.5.1
k8s.io/api/core/v1 k8s.io/api v0.37.2
devicewarden.local/x devicewarden.local/x
`)
	project := map[string]string{"go.temporal.io/server": "v1.32.1", "google.golang.org/grpc": "v1.80.0", "k8s.io/api": "v0.37.2"}
	want := []string{
		"-gcflags=go.temporal.io/server/common=-N -l",
		"-gcflags=github.com/temporalio/cli/cmd/temporal=-N -l",
		"-gcflags=devicewarden.local/x=-N -l",
	}
	if got := ownPackageFlags(list, project); !slices.Equal(got, want) {
		t.Fatalf("flags %q, want %q", got, want)
	}
}
