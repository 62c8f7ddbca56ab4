package localcluster

import (
	"context"
	"fmt"
	"strings"
)

// unoptimizedFlags are the -gcflags that build c's own packages (see component.unoptimized)
// without optimizations or inlining: one flag per package, as a module the project builds may
// nest under one it does not.
func (b *Builder) unoptimizedFlags(ctx context.Context, c component, dir string, mains []string) ([]string, error) {
	args := []string{"list", "-deps", "-f", "{{if .Module}}{{.ImportPath}} {{.Module.Path}} {{.Module.Version}}{{end}}"}
	if c.tags != "" {
		args = append(args, "-tags", c.tags)
	}
	out, err := b.goCmd(ctx, dir, append(args, mains...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("list the packages of %s: %w", c.name, err)
	}
	return ownPackageFlags(out, b.floors()), nil
}

// ownPackageFlags reads `go list -deps` lines ("package module version") and gives a -gcflags
// "-N -l" for each package whose module the project does not build at that version. A package
// of the helper module itself (no version) is the tool's own too.
func ownPackageFlags(list []byte, project map[string]string) []string {
	var flags []string
	for line := range strings.Lines(string(list)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		version := ""
		if len(f) > 2 {
			version = f[2]
		}
		if v, ok := project[f[1]]; ok && v == version {
			continue
		}
		flags = append(flags, "-gcflags="+f[0]+"=-N -l")
	}
	return flags
}
