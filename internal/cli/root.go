// Package cli builds the devicewarden command tree. Commands stay thin: parse flags, build
// dependencies, call into internal packages.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/devicewarden/devicewarden/internal/buildinfo"
)

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string) int {
	root := NewRoot()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	return ExitCode(err)
}

// ExitCode is the process exit code for a command's error: 0 for none, the count a check asks
// for (capacity check: its violations), else 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// globals are flags every command has.
type globals struct {
	stateDir  string
	logLevel  string
	logFormat string
	logger    *slog.Logger
}

// NewRoot builds the command tree.
func NewRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "devicewarden",
		Short:         "Durable, auditable remediation for unhealthy accelerator devices on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			logger, err := newLogger(g.logLevel, g.logFormat)
			if err != nil {
				return err
			}
			g.logger = logger
			slog.SetDefault(logger)
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.stateDir, "state-dir", ".devicewarden", "directory for local state: the embedded Temporal database and the local cluster")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(localCommands(g)...)
	root.AddCommand(newRunCmd(g), newDeviceCmd(g), newBreakerCmd(g), newMigrationCmd(g), newApprovalsCmd(g), newRolloutCmd(g), newCapacityCmd(g), newVersionCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use: "version", Short: "Print this build's version, VCS revision and Go version", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			info := buildinfo.Read()
			switch output {
			case "json":
				return printJSON(c.OutOrStdout(), info)
			case "text":
				fmt.Fprintln(c.OutOrStdout(), info)
				return nil
			}
			return fmt.Errorf("-o %q: want text or json", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
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
				return
			}
			f.Changed = true // so required-flag checks see it
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

// logConfig logs a command's effective flags once at start; secrets are masked.
func logConfig(logger *slog.Logger, cmd *cobra.Command) {
	var attrs []any
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		v := f.Value.String()
		secret := strings.Contains(f.Name, "key") || strings.Contains(f.Name, "token") || strings.Contains(f.Name, "secret")
		if secret && !strings.HasSuffix(f.Name, "key-file") && v != "" {
			v = "(set)"
		}
		attrs = append(attrs, f.Name, v)
	})
	logger.Info("effective configuration", append([]any{"command", cmd.CommandPath(), "build", buildinfo.Read().String()}, attrs...)...)
}
