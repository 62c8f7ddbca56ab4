//go:build lean

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// localCommands stand in for the one-machine commands, which the lean build (for clusters) leaves
// out with the embedded Temporal server, the local control plane, the simulator and the benchmarks.
func localCommands(*globals) []*cobra.Command {
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

// localKubeconfig: the lean build knows no local cluster.
func localKubeconfig(*globals) string { return "" }
