package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// standIns are the lean build's one-machine commands (lean.go): each says it is not in this build
// and which build has it, whatever its arguments. They compile in both builds so that `make lint`'s
// pass over every package, without the lean tag, reads them.
func standIns() []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range []struct{ use, short string }{
		{"cluster", "Local control plane (not in this build)"},
		{"sim", "Simulated GPU nodes and workloads (not in this build)"},
		{"dev", "Everything on one machine (not in this build)"},
		{"bench", "Benchmarks (not in this build)"},
	} {
		cmds = append(cmds, &cobra.Command{
			Use: c.use, Short: c.short, DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error { return notInLean(c.use) },
		})
	}
	return cmds
}

func notInLean(cmd string) error {
	return fmt.Errorf("devicewarden %s is not in this build: this is the lean build for clusters (make build-lean), "+
		"without the embedded Temporal server, the local cluster, the simulator and the benchmarks; "+
		"the full build (make build, the one make dev uses) has it", cmd)
}
