// Package cli builds the devicewarden command tree.
package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string) int {
	root := newRoot()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "devicewarden",
		Short:         "Durable, auditable remediation for unhealthy accelerator devices on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return bindEnv(cmd)
		},
	}
	root.AddCommand(newClusterCmd())
	return root
}

// bindEnv lets every flag also be set by DEVICEWARDEN_<FLAG> (dashes become underscores).
// A flag given on the command line wins over the environment.
func bindEnv(cmd *cobra.Command) error {
	var errs []string
	visit := func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := EnvName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", name, v, err))
			}
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	if len(errs) > 0 {
		return fmt.Errorf("invalid environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// EnvName is the environment variable that sets a flag.
func EnvName(flag string) string {
	return "DEVICEWARDEN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}
