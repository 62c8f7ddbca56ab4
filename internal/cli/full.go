//go:build !lean

package cli

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// localCommands are the commands for one machine: the local cluster, the simulator, dev and the
// benchmarks. The lean build (lean.go) has stand-ins that say which build has them.
func localCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{newClusterCmd(g), newSimCmd(g), newDevCmd(g), newBenchCmd(g)}
}

func clusterDir(g *globals) string { return filepath.Join(g.stateDir, "cluster") }

// localKubeconfig is the running local cluster's kubeconfig, empty when none runs.
func localKubeconfig(g *globals) string {
	if _, running, _ := localcluster.Status(clusterDir(g)); running {
		return localcluster.KubeconfigPath(clusterDir(g))
	}
	return ""
}
