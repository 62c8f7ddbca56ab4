// Package buildinfo says which build of devicewarden is running.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version is set at link time (make build: -X .../buildinfo.Version=<git describe>); "dev" otherwise.
var Version = "dev"

// Info is what a build reports about itself.
type Info struct {
	Version string `json:"version"`
	// Flavour is "full" (embedded Temporal, local cluster, simulator, benchmarks) or "lean" (for
	// clusters: build tag lean).
	Flavour   string `json:"flavour"`
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
}

// Read returns this build's version, the VCS revision the Go toolchain stamped ("unknown" when it
// did not: go run, or a tree without VCS) and the Go version.
func Read() Info {
	info := Info{Version: Version, Flavour: Flavour, Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one-line form: "devicewarden <version> <flavour> (<revision>[+dirty], <go version>)".
func (i Info) String() string {
	rev := i.Revision
	if i.Modified {
		rev += "+dirty"
	}
	return "devicewarden " + i.Version + " " + i.Flavour + " (" + rev + ", " + i.GoVersion + ")"
}
