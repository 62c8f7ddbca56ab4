package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/sim"
)

func newDevCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var t temporalFlags
	var ctl controllerFlags
	var cacheDir string
	var simNodes, simDevices int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on one machine: local cluster (unless --kubeconfig), embedded Temporal + UI, worker and watcher",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			logConfig(g.logger, c)
			out := c.OutOrStdout()
			topts, err := t.options(g)
			if err != nil {
				return err
			}
			copts, err := ctl.load()
			if err != nil {
				return err
			}
			if k.kubeconfig == "" {
				dir := clusterDir(g)
				if _, running, err := localcluster.Status(dir); err != nil {
					return err
				} else if running {
					fmt.Fprintf(out, "using the running local cluster (%s)\n", dir)
				} else {
					cl, err := localcluster.Start(ctx, localcluster.Options{
						Dir: dir, Builder: &localcluster.Builder{CacheDir: cacheDir, Out: out}, Out: out,
					})
					if err != nil {
						return err
					}
					defer func() {
						start := time.Now()
						_ = cl.Stop()
						g.logger.Info("local cluster stopped", "took", time.Since(start).Round(time.Millisecond))
					}()
				}
				k.kubeconfig = localcluster.KubeconfigPath(dir)
			}
			kube, err := k.client(g)
			if err != nil {
				return err
			}
			if simNodes > 0 {
				names, err := sim.CreateNodes(ctx, kube, "gpu-node", simNodes, simDevices)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "simulated GPU nodes: %v (%d devices each)\n", names, simDevices)
			}
			m := metrics.New()
			topts.MetricsHandler = m.TemporalHandler()
			tc, err := app.ConnectTemporal(ctx, topts, g.logger)
			if err != nil {
				return err
			}
			defer func() {
				start := time.Now()
				tc.Close()
				g.logger.Info("temporal stopped", "took", time.Since(start).Round(time.Millisecond))
			}()
			kc, _ := filepath.Abs(k.kubeconfig)
			fmt.Fprintf(out, "\nDeviceWarden is running.\n  kubeconfig:  %s\n", kc)
			if tc.Server != nil {
				fmt.Fprintf(out, "  Temporal:    %s (embedded, %s)\n", tc.Server.FrontendAddress(), topts.DBPath)
				if u := tc.Server.UIURL(); u != "" {
					fmt.Fprintf(out, "  Temporal UI: %s\n", u)
				}
			}
			self := os.Args[0]
			fmt.Fprintf(out, "  Try:         %s sim workload demo --node gpu-node-0 --index 0\n"+
				"               %s sim health --device %s/gpu-node-0/gpu-0 --health Unhealthy --message 'XID 79'\n"+
				"               %s device list\n"+
				"  Ctrl-C stops everything.\n\n", self, self, sim.Driver, self)
			if tc.Server != nil && ctl.slack.uiURL == "" {
				ctl.slack.uiURL = tc.Server.UIURL()
			}
			copts.Slack = ctl.slack.notifier(topts.Namespace)
			approvals, err := ctl.slack.approvalsServer(tc.Client, g.logger)
			if err != nil {
				return err
			}
			if approvals != nil {
				copts.Extra = append(copts.Extra, func(ctx context.Context) error { return serveApprovals(ctx, ctl.slack.listen, approvals, g.logger) })
			}
			// The simulated driver: probes and canaries on its devices find out whether they were fixed.
			copts.Policies = copts.Policies.WithIdentity(sim.Driver, sim.AttrNode, sim.AttrIndex).WithCDI(sim.Driver, sim.DeclaredCDIStyles...)
			copts.Extra = append(copts.Extra, (&sim.Kubelet{Kube: kube, Logger: g.logger}).Run)
			// Simulated workloads (sim workload --job --checkpoint annotation) answer checkpoint requests.
			copts.Extra = append(copts.Extra, (&sim.Checkpointer{Kube: kube, Logger: g.logger}).Run)
			// Pools made with sim pool follow their ownership label (device plugin or DRA).
			copts.Extra = append(copts.Extra, (&sim.OwnedDrivers{Kube: kube, Logger: g.logger}).Run)
			err = app.RunController(ctx, kube, tc.Client, copts, m, g.logger)
			g.logger.Info("worker and watcher stopped")
			return err
		},
	}
	k.add(cmd)
	t.add(cmd, true)
	addControllerFlags(cmd, &ctl)
	ctl.slack.addApprovals(cmd, "127.0.0.1:8090")
	cmd.Flags().StringVar(&cacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.Flags().IntVar(&simNodes, "sim-nodes", 0, "create this many simulated GPU nodes on start")
	cmd.Flags().IntVar(&simDevices, "sim-devices", 8, "devices per simulated node")
	return cmd
}

// controllerFlags are the worker's and watcher's flags; load turns them into options.
type controllerFlags struct {
	o           app.ControllerOptions
	slack       slackFlags
	policyFile  string
	leaderElect bool
	le          app.LeaderElection
}

func addControllerFlags(cmd *cobra.Command, f *controllerFlags) {
	o := &f.o
	f.slack.addNotify(cmd)
	def := policy.DefaultBreaker()
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "decide as usual but taint with effect None (preview only)")
	cmd.Flags().IntVar(&o.Workers, "workers", 8, "devices signalled in parallel")
	cmd.Flags().StringVar(&o.MetricsAddress, "metrics-address", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz (empty disables)")
	cmd.Flags().StringVar(&f.policyFile, "policy", "", "policy file (YAML) keyed by DeviceClass or driver; empty uses the default policy")
	cmd.Flags().DurationVar(&o.Breaker.Window, "breaker-window", def.Window, "circuit breaker: sliding window for the cap")
	cmd.Flags().IntVar(&o.Breaker.MaxCount, "breaker-max-count", def.MaxCount, "circuit breaker: most devices tainted automatically per window")
	cmd.Flags().Float64Var(&o.Breaker.MaxPercent, "breaker-max-percent", def.MaxPercent, "circuit breaker: most devices per window as a percentage of known devices (0 disables)")
	cmd.Flags().StringVar(&o.OwnNamespace, "own-namespace", "default", "DeviceWarden's own namespace: migration Leases and evidence ConfigMaps are kept there")
	cmd.Flags().DurationVar(&o.HeartbeatInterval, "heartbeat-interval", 2*time.Minute, "how often an unchanged device with a workflow is re-signalled")
	hy := app.DefaultHygiene()
	cmd.Flags().DurationVar(&o.Hygiene.Interval, "hygiene-interval", hy.Interval, "claim hygiene: how often the leader scans ResourceClaims (0 turns it off)")
	cmd.Flags().DurationVar(&o.Hygiene.Recheck, "hygiene-recheck", hy.Recheck, "claim hygiene: how often a standing finding is looked at again")
	cmd.Flags().DurationVar(&o.Hygiene.Policy.LeakTimeout, "hygiene-leak-timeout", hy.Policy.LeakTimeout, "claim hygiene: an allocated claim with no consumer this long is leaked")
	cmd.Flags().DurationVar(&o.Hygiene.Policy.StuckTimeout, "hygiene-stuck-timeout", hy.Policy.StuckTimeout, "claim hygiene: a share whose Pod has not started this long after the allocation is stuck")
	cmd.Flags().BoolVar(&o.Hygiene.Policy.DeleteLeaked, "hygiene-delete-leaked", false, "claim hygiene: delete a leaked claim made from a template for a Pod that is gone (behind the circuit breaker); off: report only")
	host, _ := os.Hostname()
	cmd.Flags().BoolVar(&f.leaderElect, "leader-elect", false, "run the watcher only while holding a coordination.k8s.io Lease (for several replicas)")
	cmd.Flags().StringVar(&f.le.Namespace, "leader-elect-namespace", "default", "namespace of the leader Lease")
	cmd.Flags().StringVar(&f.le.Name, "leader-elect-name", "devicewarden-watcher", "name of the leader Lease")
	cmd.Flags().StringVar(&f.le.Identity, "leader-elect-identity", host+"-"+strconv.Itoa(os.Getpid()), "this replica's identity in the Lease")
	cmd.Flags().DurationVar(&f.le.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a Lease is valid without renewal")
	cmd.Flags().DurationVar(&f.le.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up")
	cmd.Flags().DurationVar(&f.le.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew")
}

// load validates the flags and reads the policy file; a broken file stops the start.
func (f *controllerFlags) load() (app.ControllerOptions, error) {
	o := f.o
	if err := o.Breaker.Validate(); err != nil {
		return o, err
	}
	if o.HeartbeatInterval <= 0 {
		return o, fmt.Errorf("--heartbeat-interval must be positive")
	}
	if err := o.Hygiene.Validate(); err != nil {
		return o, err
	}
	if f.leaderElect {
		if !(f.le.RetryPeriod < f.le.RenewDeadline && f.le.RenewDeadline < f.le.LeaseDuration) {
			return o, fmt.Errorf("leader election: want retry period < renew deadline < lease duration")
		}
		le := f.le
		o.LeaderElection = &le
	}
	o.Policies = policy.DefaultSet()
	if f.policyFile != "" {
		set, err := policy.LoadFile(f.policyFile)
		if err != nil {
			return o, err
		}
		for _, w := range set.Warnings() {
			slog.Warn("policy file", "file", f.policyFile, "warning", w)
		}
		o.Policies = set
	}
	return o, nil
}

func newRunCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var t temporalFlags
	var ctl controllerFlags
	var embed bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the worker and the watcher against a cluster (in-cluster config by default)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			logConfig(g.logger, c)
			topts, err := t.options(g)
			if err != nil {
				return err
			}
			if topts.Address == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" && !embed {
				return fmt.Errorf("in a cluster, run needs --temporal-address: without it every replica would embed its own SQLite Temporal; pass --embed-temporal to do that anyway")
			}
			copts, err := ctl.load()
			if err != nil {
				return err
			}
			kube, err := k.client(g)
			if err != nil {
				return err
			}
			m := metrics.New()
			topts.MetricsHandler = m.TemporalHandler()
			tc, err := app.ConnectTemporal(c.Context(), topts, g.logger)
			if err != nil {
				return err
			}
			defer tc.Close()
			copts.Slack = ctl.slack.notifier(topts.Namespace)
			return app.RunController(c.Context(), kube, tc.Client, copts, m, g.logger)
		},
	}
	k.add(cmd)
	t.add(cmd, true)
	addControllerFlags(cmd, &ctl)
	cmd.Flags().BoolVar(&embed, "embed-temporal", false, "in a cluster, embed a SQLite Temporal server in this process when --temporal-address is empty (refused otherwise)")
	return cmd
}
