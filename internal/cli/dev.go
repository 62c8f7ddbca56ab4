//go:build !lean

package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/localcluster"
	"github.com/devicewarden/devicewarden/internal/metrics"
	"github.com/devicewarden/devicewarden/internal/sim"
)

func newDevCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var t temporalFlags
	var ctl controllerFlags
	var cacheDir string
	var simNodes, simDevices int
	var dcgmListen string
	var dcgmDRA bool
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
			// Detectors may report devices (DeviceHealthReports), as with the chart.
			if err := app.InstallReportCRD(ctx, kube); err != nil {
				g.logger.Warn("device health reports are not read", "error", err)
			}
			if copts.Reports, err = k.reports(g); err != nil {
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
			if ctl.console.listen != "" {
				fmt.Fprintf(out, "  Fleet page:  http://%s\n", ctl.console.listen)
			}
			if dcgmListen != "" {
				fmt.Fprintf(out, "  dcgm-exporter (simulated): http://%s/metrics (scrape it, then --prometheus-url)\n", dcgmListen)
			}
			self := os.Args[0]
			fmt.Fprintf(out, "  Try:         %s sim workload demo --node gpu-node-0 --index 0\n"+
				"               %s sim health --device %s/gpu-node-0/gpu-0 --health Unhealthy --message 'XID 79'\n"+
				"               %s device list\n"+
				"  Ctrl-C stops everything.\n\n", self, self, sim.Driver, self)
			if tc.Server != nil && ctl.slack.uiURL == "" {
				ctl.slack.uiURL = tc.Server.UIURL()
			}
			copts.Namespace = topts.Namespace
			copts.Slack = ctl.slack.notifier(topts.Namespace)
			if err := ctl.addApprovals(&copts, tc.Client, kube, g.logger); err != nil {
				return err
			}
			ctl.console.addConsole(&copts, tc.Client, kube, ctl.slack.uiURL, g.logger)
			// The simulated driver: probes and canaries on its devices find out whether they were fixed.
			copts.Policies = copts.Policies.WithIdentity(sim.Driver, sim.Identity...).WithCDI(sim.Driver, sim.DeclaredCDIStyles...)
			copts.Extra = append(copts.Extra, (&sim.Kubelet{Kube: kube, Logger: g.logger}).Run)
			// Simulated workloads (sim workload --job --checkpoint annotation) answer checkpoint requests.
			copts.Extra = append(copts.Extra, (&sim.Checkpointer{Kube: kube, Logger: g.logger}).Run)
			// Pools made with sim pool follow their ownership label (device plugin or DRA).
			copts.Extra = append(copts.Extra, (&sim.OwnedDrivers{Kube: kube, Logger: g.logger}).Run)
			// A node remediator: a repair ladder's node step (a NodeReboot) reboots a simulated node.
			copts.Extra = append(copts.Extra, (&sim.Remediator{Kube: kube, Logger: g.logger}).Run)
			if dcgmListen != "" {
				// The simulated GPUs' DCGM metrics (sim health --xid sets an XID).
				exp := &sim.Exporter{Kube: kube, DRA: dcgmDRA}
				copts.Extra = append(copts.Extra, func(ctx context.Context) error {
					if err := exp.Serve(ctx, dcgmListen); err != nil {
						// A port taken (a real dcgm-exporter on this machine) costs only the simulation.
						g.logger.Warn("the simulated dcgm-exporter is not served", "error", err)
					}
					return nil
				})
			}
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
	cmd.Flags().StringVar(&dcgmListen, "sim-dcgm-listen", "127.0.0.1:9400", "serve the simulated GPUs' dcgm-exporter metrics here (empty: not served)")
	cmd.Flags().BoolVar(&dcgmDRA, "sim-dcgm-dra", false, "the simulated dcgm-exporter adds its DRA labels (dra_driver_name, dra_pool_name, dra_device_name) to every series")
	cmd.Flags().IntVar(&simDevices, "sim-devices", 8, "devices per simulated node")
	return cmd
}
