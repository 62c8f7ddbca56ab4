package cli

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/policy"
	"github.com/devicewarden/devicewarden/internal/watcher"
)

// controllerFlags are the worker's and watcher's flags; load turns them into options.
type controllerFlags struct {
	o           app.ControllerOptions
	console     consoleFlags
	slack       slackFlags
	policyFile  string
	leaderElect bool
	le          app.LeaderElection
	// promURL and promInterval point the watcher at a Prometheus that scrapes dcgm-exporter.
	promURL      string
	promInterval time.Duration
}

func addControllerFlags(cmd *cobra.Command, f *controllerFlags) {
	o := &f.o
	f.slack.addNotify(cmd)
	f.console.add(cmd)
	def := breaker.DefaultConfig()
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "decide as usual but taint with effect None (preview only)")
	cmd.Flags().IntVar(&o.Workers, "workers", 8, "devices signalled in parallel")
	cmd.Flags().StringVar(&o.MetricsAddress, "metrics-address", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz (empty disables)")
	cmd.Flags().StringVar(&f.policyFile, "policy", "", "policy file (YAML) keyed by DeviceClass or driver; empty uses the default policy")
	cmd.Flags().DurationVar(&o.Breaker.Window, "breaker-window", def.Window, "circuit breaker: sliding window for the cap")
	cmd.Flags().IntVar(&o.Breaker.MaxCount, "breaker-max-count", def.MaxCount, "circuit breaker: most devices tainted automatically per window")
	cmd.Flags().IntVar(&o.Breaker.MaxResets, "breaker-max-resets", breaker.DefaultMaxResets, "circuit breaker: most resets repair ladders may run at a time (a budget of its own)")
	cmd.Flags().IntVar(&o.Breaker.MaxResetFailures, "breaker-max-reset-failures", breaker.DefaultMaxResetFailures, "circuit breaker: failed resets within the window that stop resets until a person resumes the breaker or the window passes")
	cmd.Flags().IntVar(&o.Breaker.MaxReboots, "breaker-max-reboots", breaker.DefaultMaxReboots, "circuit breaker: most nodes of one node pool a repair ladder may reboot at a time (a budget of its own)")
	cmd.Flags().StringSliceVar(&o.NodePoolLabels, "node-pool-labels", breaker.DefaultNodePoolLabels, "node labels that name a node's pool for --breaker-max-reboots, the first one a node carries counting")
	cmd.Flags().Float64Var(&o.Breaker.MaxPercent, "breaker-max-percent", def.MaxPercent, "circuit breaker: most devices per window as a percentage of known devices (0 disables)")
	cmd.Flags().StringVar(&o.OwnNamespace, "own-namespace", "default", "DeviceWarden's own namespace: migration Leases and evidence ConfigMaps are kept there")
	cmd.Flags().DurationVar(&o.HeartbeatInterval, "heartbeat-interval", 2*time.Minute, "how often an unchanged device with a workflow is re-signalled")
	cmd.Flags().DurationVar(&o.ReportRetention, "report-retention", 7*24*time.Hour, "how long a DeviceHealthReport stands after it was observed; older ones are deleted and their word withdrawn (0 keeps them)")
	cmd.Flags().StringVar(&f.promURL, "prometheus-url", "", "a Prometheus that scrapes dcgm-exporter (http://prometheus:9090): its XIDs and other faults reach their GPUs (the policy's signals.prometheus queries); empty reads none")
	cmd.Flags().DurationVar(&f.promInterval, "prometheus-interval", 15*time.Second, "how often the Prometheus queries are asked")
	cmd.Flags().IntVar(&o.WorkflowCacheSize, "workflow-cache-size", app.DefaultWorkflowCacheSize, "device workflows the worker keeps in memory between tasks (about 90 KB each); one that fell out is replayed from its history on its next signal")
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

// addApprovals serves Slack's button presses beside the controller when a signing secret or an
// app-level token is set; what was served is remembered in DeviceWarden's own namespace.
func (f *controllerFlags) addApprovals(o *app.ControllerOptions, tc client.Client, kube kubernetes.Interface, logger *slog.Logger) error {
	s, err := f.slack.approvalsServer(tc, kube, o.OwnNamespace, logger)
	if err != nil || s == nil {
		return err
	}
	o.Extra = append(o.Extra, f.slack.approvalRunners(s, logger)...)
	return nil
}

// load validates the flags and reads the policy file; a broken file stops the start.
func (f *controllerFlags) load() (app.ControllerOptions, error) {
	o := f.o
	if err := f.slack.validate(); err != nil {
		return o, err
	}
	if err := f.console.validate(); err != nil {
		return o, err
	}
	if err := o.Breaker.Validate(); err != nil {
		return o, err
	}
	for _, l := range o.NodePoolLabels {
		if errs := validation.IsQualifiedName(l); len(errs) > 0 {
			return o, fmt.Errorf("--node-pool-labels: %q is not a label key: %s", l, strings.Join(errs, "; "))
		}
	}
	if o.HeartbeatInterval <= 0 {
		return o, fmt.Errorf("--heartbeat-interval must be positive")
	}
	if o.ReportRetention < 0 {
		return o, fmt.Errorf("--report-retention must be 0 (keep) or positive")
	}
	if err := o.Hygiene.Validate(); err != nil {
		return o, err
	}
	if f.promURL != "" {
		u, err := url.Parse(f.promURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return o, fmt.Errorf("--prometheus-url %q: want http(s)://host:port", f.promURL)
		}
		if f.promInterval < time.Second {
			return o, fmt.Errorf("--prometheus-interval %s: want a second or more", f.promInterval)
		}
		o.Prometheus = &watcher.PromConfig{URL: f.promURL, Interval: f.promInterval}
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
			if topts.Address == "" && !app.Embeds {
				return app.ErrNoEmbeddedServer
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
			copts.Namespace = topts.Namespace
			copts.Slack = ctl.slack.notifier(topts.Namespace)
			if err := ctl.addApprovals(&copts, tc.Client, kube, g.logger); err != nil {
				return err
			}
			ui := ctl.slack.uiURL
			if ui == "" && tc.Server != nil {
				ui = tc.Server.UIURL()
			}
			ctl.console.addConsole(&copts, tc.Client, kube, ui, g.logger)
			if copts.Reports, err = k.reports(g); err != nil {
				return err
			}
			return app.RunController(c.Context(), kube, tc.Client, copts, m, g.logger)
		},
	}
	k.add(cmd)
	t.add(cmd, app.Embeds)
	addControllerFlags(cmd, &ctl)
	ctl.slack.addApprovals(cmd, ":8090")
	if !app.Embeds {
		return cmd
	}
	cmd.Flags().BoolVar(&embed, "embed-temporal", false, "in a cluster, embed a SQLite Temporal server in this process when --temporal-address is empty (refused otherwise)")
	return cmd
}
