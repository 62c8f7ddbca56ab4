//go:build !lean

package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/bench"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/temporalserver"
)

func newBenchCmd(_ *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure DeviceWarden on a fresh local stack and print figures"}
	var o bench.QuarantineOptions
	q := &cobra.Command{
		Use:   "quarantine",
		Short: "Detect -> quarantine latency: pod status write until the DeviceTaintRule is visible",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.Devices < 1 {
				return fmt.Errorf("--devices must be >= 1")
			}
			if o.Settle < 0 {
				return fmt.Errorf("--settle must be >= 0")
			}
			o.Out = c.OutOrStdout()
			return bench.Quarantine(c.Context(), o)
		},
	}
	q.Flags().IntVar(&o.Devices, "devices", 64, "devices to flip Unhealthy (one pod each)")
	q.Flags().DurationVar(&o.Settle, "settle", 300*time.Millisecond,
		"pause after each rule is seen, so the previous device's alert and node report are done before the next write (0: back to back)")
	q.Flags().StringVar(&o.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	var ro bench.ReportsOptions
	reps := &cobra.Command{
		Use:   "reports",
		Short: "A detector's DeviceHealthReport -> quarantine latency, beside the Pod-status path on the same stack",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if ro.Devices < 1 {
				return fmt.Errorf("--devices must be >= 1")
			}
			if ro.Settle < 0 {
				return fmt.Errorf("--settle must be >= 0")
			}
			if ro.Fleet < 0 || ro.Fleet > 0 && ro.Fleet*8 < 2*ro.Devices {
				return fmt.Errorf("--fleet %d: want 0, or nodes enough for the %d devices measured (8 a node)", ro.Fleet, 2*ro.Devices)
			}
			ro.Out = c.OutOrStdout()
			return bench.Reports(c.Context(), ro)
		},
	}
	reps.Flags().IntVar(&ro.Devices, "devices", 100, "devices reported by a report, and as many by Pod status")
	reps.Flags().DurationVar(&ro.Settle, "settle", 300*time.Millisecond, "pause after each rule is seen")
	reps.Flags().IntVar(&ro.Fleet, "fleet", 0, "nodes of 8 GPUs, each held by a Pod, the measured devices are spread over (0: nodes of their own)")
	reps.Flags().BoolVar(&ro.ByName, "by-name", false, "reports name their device by its DRA name instead of its UUID on its node")
	reps.Flags().StringVar(&ro.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(reps)
	var do bench.DCGMOptions
	dcgm := &cobra.Command{
		Use:   "dcgm",
		Short: "An XID in the simulated dcgm-exporter -> quarantine, through a real Prometheus: the whole delay and DeviceWarden's part",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if do.Devices < 1 {
				return fmt.Errorf("--devices must be >= 1")
			}
			if do.Scrape < 100*time.Millisecond || do.Interval < time.Second {
				return fmt.Errorf("--scrape must be >= 100ms and --interval >= 1s")
			}
			if do.Fleet < 0 {
				return fmt.Errorf("--fleet must be >= 0")
			}
			do.Out = c.OutOrStdout()
			return bench.DCGM(c.Context(), do)
		},
	}
	dcgm.Flags().IntVar(&do.Devices, "devices", 40, "idle GPUs that raise an XID, one at a time")
	dcgm.Flags().DurationVar(&do.Scrape, "scrape", time.Second, "Prometheus' scrape interval")
	dcgm.Flags().DurationVar(&do.Interval, "interval", time.Second, "the watcher's query interval (--prometheus-interval)")
	dcgm.Flags().IntVar(&do.Fleet, "fleet", 0, "nodes of 8 GPUs, each held by a Pod, beside the idle ones (their series in Prometheus too)")
	dcgm.Flags().StringVar(&do.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(dcgm)
	var fo bench.FloodOptions
	flood := &cobra.Command{
		Use:   "flood",
		Short: "A flood of DeviceHealthReports: signals (deduplicated), rules (the breaker's cap) and report status writes",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if fo.Reports < 1 || fo.Devices < 1 || fo.Over <= 0 {
				return fmt.Errorf("--reports and --devices must be >= 1, --over positive")
			}
			fo.Out = c.OutOrStdout()
			return bench.Flood(c.Context(), fo)
		},
	}
	flood.Flags().IntVar(&fo.Reports, "reports", 10000, "reports to create")
	flood.Flags().IntVar(&fo.Devices, "devices", 200, "idle GPUs the reports are about")
	flood.Flags().DurationVar(&fo.Over, "over", time.Minute, "how long the reports are created over")
	flood.Flags().StringVar(&fo.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(flood)
	var uo bench.UnitsOptions
	units := &cobra.Command{
		Use:   "units",
		Short: "Fence latency of a partitionable GPU's every form, against a plain GPU's one rule on the same stack",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if uo.Nodes < 1 {
				return fmt.Errorf("--nodes must be >= 1")
			}
			uo.Out = c.OutOrStdout()
			return bench.Units(c.Context(), uo)
		},
	}
	units.Flags().IntVar(&uo.Nodes, "nodes", 4, "nodes of 8 partitionable GPUs (and as many of 8 plain GPUs)")
	units.Flags().StringVar(&uo.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	var w bench.WatcherOptions
	wb := &cobra.Command{
		Use:   "watcher",
		Short: "Watcher at fleet scale: load pods with device health into a real apiserver, then a storm of status updates",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if w.Pods < 1 || w.DevicesPerPod < 1 || w.Updates < 1 || w.Concurrency < 1 {
				return fmt.Errorf("--pods, --devices-per-pod, --updates and --concurrency must be >= 1")
			}
			if w.Sit < time.Minute {
				return fmt.Errorf("--sit must be at least 1m")
			}
			if len(w.ServerSettings) > 0 && w.Lean == "" {
				return fmt.Errorf("--server-setting needs --lean: only then does the bench run a Temporal server")
			}
			for _, kv := range w.ServerSettings { // refused now, not after the fleet is loaded
				if _, _, err := temporalserver.ParseSetting(kv); err != nil {
					return err
				}
			}
			w.Out = c.OutOrStdout()
			return bench.Watcher(c.Context(), w)
		},
	}
	wb.Flags().IntVar(&w.Pods, "pods", 10000, "pods to load")
	wb.Flags().IntVar(&w.DevicesPerPod, "devices-per-pod", 8, "device health entries per pod")
	wb.Flags().IntVar(&w.Updates, "updates", 20000, "status updates in the storm (half change health, half do not)")
	wb.Flags().IntVar(&w.Concurrency, "concurrency", 32, "parallel writers")
	wb.Flags().StringVar(&w.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	wb.Flags().StringArrayVar(&w.RunArgs, "run-arg", nil, "with --lean: a flag for its run, e.g. --run-arg=--workflow-cache-size=2000 (repeatable)")
	wb.Flags().StringArrayVar(&w.ServerSettings, "server-setting", nil, "with --lean: a dynamic config key=value for the embedded Temporal server, over its built-in tuning (repeatable)")
	wb.Flags().DurationVar(&w.Sit, "sit", 2*time.Minute, "with --lean: how long the live workflows are measured sitting on their timers, minute by minute")
	wb.Flags().StringVar(&w.Lean, "lean", "", "the lean binary (make build-lean): its run is the watcher, against the embedded Temporal server in its own process, and the storm's device workflows are measured live; empty: the watcher alone with a counting signaler")
	var r bench.ReleaseOptions
	rel := &cobra.Command{
		Use:   "release",
		Short: "Recovery review cost: device fixed + release until its rule is deleted (zero stability window), then many at once",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if r.Devices < 1 || r.Sequential < 0 {
				return fmt.Errorf("--devices must be >= 1 and --sequential >= 0")
			}
			r.Out = c.OutOrStdout()
			return bench.Release(c.Context(), r)
		},
	}
	rel.Flags().IntVar(&r.Devices, "devices", 120, "devices to quarantine and release")
	rel.Flags().IntVar(&r.Sequential, "sequential", 20, "of those, released one at a time for latency; the rest at once")
	rel.Flags().StringVar(&r.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	var rp bench.RepairOptions
	rep := &cobra.Command{
		Use:   "repair",
		Short: "Time to repair: transient faults repaired by the ladder (report -> rule deleted), against the same steps done by hand",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if rp.Devices < 1 || rp.Floor < 1 {
				return fmt.Errorf("--devices and --floor must be >= 1")
			}
			rp.Out = c.OutOrStdout()
			return bench.Repair(c.Context(), rp)
		},
	}
	rep.Flags().IntVar(&rp.Devices, "devices", 100, "devices given a transient fault, one at a time, and repaired by the ladder")
	rep.Flags().IntVar(&rp.Floor, "floor", 20, "further devices repaired by hand for the floor")
	rep.Flags().StringVar(&rp.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(rep)
	var co bench.CausesOptions
	var mix string
	causes := &cobra.Command{
		Use:   "causes",
		Short: "GPU-hours out of service per 100 faults of a catalogue mix: the device-level ladder (measured) against a node-level remediator",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			m, err := bench.ParseMix(mix)
			if err != nil {
				return err
			}
			if co.Faults < 1 || co.GPUsPerNode < 1 || co.Reboot < 0 || co.Drain < 0 || co.Storm < 0 {
				return fmt.Errorf("--faults and --gpus-per-node must be >= 1, --reboot, --drain and --storm not negative")
			}
			co.Mix, co.Out = m, c.OutOrStdout()
			return bench.Causes(c.Context(), co)
		},
	}
	causes.Flags().IntVar(&co.Faults, "faults", 100, "faults drawn from the mix, one at a time, each on a node of its own")
	causes.Flags().StringVar(&mix, "mix", "application=40,reset=35,node=15,replace=10", "weights of the catalogue's classes")
	causes.Flags().DurationVar(&co.Reboot, "reboot", 10*time.Minute, "what a node's reboot takes on the fleet")
	causes.Flags().DurationVar(&co.Drain, "drain", 5*time.Minute, "what draining a whole node takes (node-level remediation)")
	causes.Flags().IntVar(&co.GPUsPerNode, "gpus-per-node", 8, "GPUs a node-level remediation takes out")
	causes.Flags().IntVar(&co.Storm, "storm", 50, "devices that then fail at once under the default reset budget (0: no storm)")
	causes.Flags().Uint64Var(&co.Seed, "seed", 1, "seed of the draw")
	causes.Flags().StringVar(&co.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(causes)
	cmd.AddCommand(
		fleetBenchCmd("rollout", "Rollout gates at fleet scale: load shared GPUs and allocated claims into a real apiserver, then time the gate activity", bench.Rollout),
		fleetBenchCmd("capacity", "Capacity check and what-if at fleet scale: load shared GPUs and allocated claims into a real apiserver, then time both", bench.Capacity))
	var mo bench.MigrateOptions
	mig := &cobra.Command{
		Use:   "migrate",
		Short: "Checkpoint-migrate: devices Unhealthy at once -> each Job Ready on another device, and what a migration costs Temporal",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if mo.Workloads < 1 {
				return fmt.Errorf("--workloads must be >= 1")
			}
			mo.Out = c.OutOrStdout()
			return bench.Migrate(c.Context(), mo)
		},
	}
	mig.Flags().IntVar(&mo.Workloads, "workloads", 20, "checkpointing Jobs, one per node, whose devices fail together")
	mig.Flags().StringVar(&mo.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	var sb bench.StormOptions
	var stormTemporal string
	var stormShards int
	storm := &cobra.Command{
		Use:   "storm",
		Short: "A fleet turns Unknown, then Unhealthy, at once: breaker, Temporal and control-plane cost, and one force-quarantine mid-storm",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if sb.Devices < 8 || sb.Devices%8 != 0 {
				return fmt.Errorf("--devices must be a positive multiple of 8 (devices per simulated node)")
			}
			if sb.Share <= 0 || sb.Share > 1 {
				return fmt.Errorf("--share %g: want a part of the fleet above 0 and at most 1", sb.Share)
			}
			if sb.Rest < 0 {
				return fmt.Errorf("--rest must not be negative")
			}
			switch stormTemporal {
			case "embedded":
			case "postgres":
				if stormShards < 1 {
					return fmt.Errorf("--shards must be at least 1")
				}
				sb.PGShards = stormShards
			default:
				return fmt.Errorf("--temporal %q: want embedded or postgres", stormTemporal)
			}
			sb.Out = c.OutOrStdout()
			return bench.Storm(c.Context(), sb)
		},
	}
	storm.Flags().IntVar(&sb.Devices, "devices", 5000, "devices of the fleet, 8 per node (the storm turns --share of them)")
	storm.Flags().StringSliceVar(&sb.Healths, "health", []string{"Unknown", "Unhealthy"}, "runs, each on a fresh stack: the health every device turns")
	storm.Flags().StringVar(&sb.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	storm.Flags().StringVar(&stormTemporal, "temporal", "embedded", "embedded: the embedded server on SQLite; postgres: the stock Temporal server on PostgreSQL (the distribution's package) with SQL visibility, as a fleet runs it")
	storm.Flags().IntVar(&stormShards, "shards", 4, "history shards of the server on PostgreSQL")
	storm.Flags().Float64Var(&sb.Share, "share", 1, "the part of the fleet the storm turns (0.01: 1% of --devices); the rest stays healthy")
	storm.Flags().DurationVar(&sb.Rest, "rest", 0, "first measure the healthy fleet at rest this long (CPU, heap, Temporal actions)")
	child := childCmd("watcher-child", "Internal: the watcher process measured by `bench watcher`",
		"kubeconfig", "kubeconfig of the cluster to watch", bench.WatcherChild)
	server := temporalChildCmd()
	var fl bench.FlavoursOptions
	flavours := &cobra.Command{
		Use:   "flavours",
		Short: "Size, start-up time and resident memory of the full and the lean binary's run",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if fl.Runs < 1 || fl.Idle < 0 {
				return fmt.Errorf("--runs must be >= 1 and --idle >= 0")
			}
			fl.Out = c.OutOrStdout()
			return bench.Flavours(c.Context(), fl)
		},
	}
	flavours.Flags().StringVar(&fl.Full, "full", "bin/devicewarden", "the full binary (make build)")
	flavours.Flags().StringVar(&fl.Lean, "lean", "bin/devicewarden-lean", "the lean binary (make build-lean)")
	flavours.Flags().IntVar(&fl.Runs, "runs", 5, "starts of each")
	flavours.Flags().DurationVar(&fl.Idle, "idle", 10*time.Second, "how long each runs ready before its memory is read again")
	flavours.Flags().StringVar(&fl.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	cmd.AddCommand(q, units, wb, rel, mig, storm, flavours, child, server)
	return cmd
}

// childCmd is a hidden command a benchmark runs as a process of its own, so its CPU time and memory
// are its own; run gets the one flag's value and writes its figures to stdout.
func childCmd(use, short, flag, usage string, run func(context.Context, string, io.Writer) error) *cobra.Command {
	var value string
	cmd := &cobra.Command{
		Use: use, Hidden: true, Short: short, Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return run(c.Context(), value, c.OutOrStdout()) },
	}
	cmd.Flags().StringVar(&value, flag, "", usage)
	return cmd
}

// temporalChildCmd runs the embedded Temporal server alone for `bench watcher --lean`.
func temporalChildCmd() *cobra.Command {
	var db string
	var kvs []string
	cmd := &cobra.Command{
		Use: "temporal-child", Hidden: true, Short: "Internal: the embedded Temporal server alone, measured by `bench watcher --lean`",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			settings := map[string]any{}
			for _, kv := range kvs {
				k, v, err := temporalserver.ParseSetting(kv)
				if err != nil {
					return err
				}
				settings[k] = v
			}
			return temporalserver.RunChild(c.Context(), db, settings, c.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&db, "db", "", "the SQLite file")
	cmd.Flags().StringArrayVar(&kvs, "setting", nil, "a dynamic config key=value (repeatable)")
	return cmd
}

// fleetBenchCmd is a benchmark over the shared-GPU fleet (nodes x devices, allocated claims).
func fleetBenchCmd(use, short string, run func(context.Context, bench.RolloutOptions) error) *cobra.Command {
	var o bench.RolloutOptions
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.Nodes < 1 || o.Devices < 1 || o.Devices > 128 || o.Claims < 0 || o.Runs < 1 {
				return fmt.Errorf("--nodes and --runs must be >= 1, --devices between 1 and 128, --claims >= 0")
			}
			o.Out = c.OutOrStdout()
			return run(c.Context(), o)
		},
	}
	cmd.Flags().IntVar(&o.Nodes, "nodes", 1000, "nodes")
	cmd.Flags().IntVar(&o.Devices, "devices", 8, "shared GPUs per node")
	cmd.Flags().IntVar(&o.Claims, "claims", 10000, "allocated claims")
	cmd.Flags().IntVar(&o.Runs, "runs", 5, "runs to time")
	cmd.Flags().StringVar(&o.CacheDir, "cache-dir", localcluster.DefaultCacheDir(), "where control-plane binaries are built and cached")
	return cmd
}
