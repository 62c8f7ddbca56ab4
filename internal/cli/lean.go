//go:build lean

package cli

import "github.com/spf13/cobra"

// The lean build (for clusters) leaves out the one-machine commands with the embedded Temporal
// server, the local control plane, the simulator and the benchmarks. What is here only picks;
// the code it picks compiles in both builds (standins.go), as `make lint` reads every package in the full build.

func localCommands(*globals) []*cobra.Command { return standIns() }

// localKubeconfig: the lean build knows no local cluster.
func localKubeconfig(*globals) string { return "" }
