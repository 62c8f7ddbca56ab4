package localcluster

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
)

// Module floors. A helper module (kubernetes, kwok, etcd, Prometheus) needs many modules the
// project needs too: k8s.io/api, client-go, grpc, protobuf, x/net. Go's build cache reuses a
// compiled package only when its source and every dependency's are the same, so where a tool
// pins an older patch or minor version than the project, the same packages compile twice on a
// cold machine. Requiring the project's versions in the helper module raises those (go mod tidy
// keeps the higher of the two, never a lower one), and what the project has already compiled
// comes from the cache: kubernetes reuses 784 of its 2,222 packages instead of 196, the temporal
// CLI 678 of 1,104 instead of 65.

// ProjectModules is the module versions linked into the running binary: the project's own
// selection (a test binary gives its package's subset of the same selection).
func ProjectModules() map[string]string {
	info, _ := debug.ReadBuildInfo()
	return modulesOf(info)
}

// modulesOf is the versions of a build's dependencies, less the replaced ones (a replacement's
// version is not the module's).
func modulesOf(info *debug.BuildInfo) map[string]string {
	out := map[string]string{}
	if info == nil {
		return out
	}
	for _, d := range info.Deps {
		if d.Replace != nil || d.Version == "" || d.Version == "(devel)" {
			continue
		}
		out[d.Path] = d.Version
	}
	return out
}

// goModFor is c's go.mod, with the builder's module floors required when c takes them.
func (b *Builder) goModFor(ctx context.Context, c component) (string, error) {
	mod, err := c.goMod(ctx)
	if err != nil || !c.floors {
		return mod, err
	}
	return mod + floorRequires(withoutOwn(b.floors(), c.ownModules)), nil
}

// floors is the builder's module floors: Floors, or the project's own selection when unset.
func (b *Builder) floors() map[string]string {
	if b.Floors != nil {
		return b.Floors
	}
	return ProjectModules()
}

// withoutOwn is the floors less the modules under the given path prefixes.
func withoutOwn(floors map[string]string, own []string) map[string]string {
	out := map[string]string{}
	for path, v := range floors {
		if !slices.ContainsFunc(own, func(prefix string) bool { return strings.HasPrefix(path, prefix) }) {
			out[path] = v
		}
	}
	return out
}

// floorRequires is a require block of the floors, sorted; empty when there are none.
func floorRequires(floors map[string]string) string {
	if len(floors) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\n// The project's module versions, as floors (shared compiles).\nrequire (\n")
	for _, path := range slices.Sorted(maps.Keys(floors)) {
		fmt.Fprintf(&sb, "\t%s %s\n", path, floors[path])
	}
	sb.WriteString(")\n")
	return sb.String()
}
