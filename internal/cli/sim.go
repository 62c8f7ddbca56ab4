//go:build !lean

package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/devicewarden/devicewarden/internal/cause"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/sim"
)

func newSimCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sim", Short: "Simulate a DRA GPU driver and kubelet health reports on a local cluster"}
	cmd.AddCommand(newSimNodesCmd(g), newSimWorkloadCmd(g), newSimHealthCmd(g), newSimPoolCmd(g), newSimMisbehaveCmd(g))
	return cmd
}

func newSimNodesCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var count, devices int
	var prefix string
	var partitions, shared, unenforced bool
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "Create kwok GPU nodes, each publishing a ResourceSlice of simulated devices",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if count < 1 || devices < 1 || devices > 128 {
				return fmt.Errorf("--count must be >= 1 and --devices between 1 and 128")
			}
			if partitions && devices > sim.MaxPartitionedGPUs {
				return fmt.Errorf("--partitions publishes a counter set per GPU: at most %d GPUs (--devices), as many counter sets as a ResourceSlice holds", sim.MaxPartitionedGPUs)
			}
			if unenforced && !shared {
				return fmt.Errorf("--unenforced needs --shared: only shared devices have shares to enforce")
			}
			if shared && partitions {
				return fmt.Errorf("--shared and --partitions publish different devices: choose one")
			}
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			if shared {
				names, err := sim.CreateSharedNodes(c.Context(), cs, prefix, count, devices, unenforced)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%d nodes with %d shared devices each (%s of memory, driver %s, shares enforced: %t): %v\n", len(names), devices, sim.SharedMemory, sim.Driver, !unenforced, names)
				return nil
			}
			if partitions {
				names, err := sim.CreatePartitionedNodes(c.Context(), cs, prefix, count, devices)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%d nodes with %d partitionable GPUs each (%d forms per GPU, driver %s): %v\n", len(names), devices, sim.FormsPerGPU, sim.Driver, names)
				return nil
			}
			names, err := sim.CreateNodes(c.Context(), cs, prefix, count, devices)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%d nodes with %d devices each (driver %s): %v\n", len(names), devices, sim.Driver, names)
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().IntVar(&count, "count", 3, "number of nodes")
	cmd.Flags().IntVar(&devices, "devices", 8, "devices per node")
	cmd.Flags().StringVar(&prefix, "prefix", "gpu-node", "node name prefix")
	cmd.Flags().BoolVar(&shared, "shared", false, "shared devices: allowMultipleAllocations and "+sim.SharedMemory+" of memory taken in steps of "+sim.SharedMin)
	cmd.Flags().BoolVar(&unenforced, "unenforced", false, "with --shared, a driver that does not hold tenants to their shares (sim misbehave --unenforced sets it per node)")
	cmd.Flags().BoolVar(&partitions, "partitions", false, "partitionable GPUs: per GPU a counter set in a slice of its own, the whole device and its partitions (1g.10gb, 3g.40gb) drawing on it")
	return cmd
}

func newSimWorkloadCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var w sim.Workload
	var index int
	var job bool
	var jo sim.JobOptions
	cmd := &cobra.Command{
		Use:   "workload NAME",
		Short: "Run a pod (or with --job a Job) that claims simulated GPUs (optionally a given node's gpu-<index>)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if w.Memory != "" {
				if _, err := resource.ParseQuantity(w.Memory); err != nil {
					return fmt.Errorf("--memory %q: %w", w.Memory, err)
				}
			}
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			w.Name = args[0]
			if index >= 0 {
				w.Index = &index
			}
			if err := sim.EnsureNamespace(c.Context(), cs, w.Namespace); err != nil {
				return err
			}
			switch jo.Checkpoint {
			case "", kubeobj.CheckpointNone, kubeobj.CheckpointAnnotation:
			default:
				return fmt.Errorf("--checkpoint %q: want %s or %s", jo.Checkpoint, kubeobj.CheckpointNone, kubeobj.CheckpointAnnotation)
			}
			if job {
				j, err := w.CreateJob(c.Context(), cs, jo)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "job %s/%s created\n", j.Namespace, j.Name)
				return nil
			}
			if jo.Checkpoint != "" || jo.Shrinkable || jo.Pods > 1 {
				return fmt.Errorf("--checkpoint, --shrinkable and --pods describe a Job: add --job")
			}
			pod, err := w.Create(c.Context(), cs)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "pod %s/%s created\n", pod.Namespace, pod.Name)
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().StringVar(&w.Namespace, "namespace", "default", "namespace")
	cmd.Flags().StringVar(&w.Node, "node", "", "pin to this node's devices")
	cmd.Flags().IntVar(&index, "index", -1, "pin to gpu-<index> (-1: any)")
	cmd.Flags().BoolVar(&w.Template, "template", true, "use a ResourceClaimTemplate (false: a ResourceClaim)")
	cmd.Flags().BoolVar(&w.DevicePlugin, "device-plugin", false, "request a device-plugin device ("+sim.PluginResource+") instead of a DRA claim")
	cmd.Flags().IntVar(&w.Count, "count", 1, "devices in the claim (e.g. 8 for a training Pod)")
	cmd.Flags().StringVar(&w.Memory, "memory", "", "a share of a shared device's memory (e.g. 8Gi; pools made with sim pool --shared)")
	cmd.Flags().BoolVar(&job, "job", false, "run a Job whose Pods keep running until DeviceWarden moves them")
	cmd.Flags().IntVar(&jo.Pods, "pods", 1, "Pods of the Job (Indexed when more than one)")
	cmd.Flags().StringVar(&jo.Checkpoint, "checkpoint", "", "how the Job saves its work: none or annotation (the simulator answers checkpoint requests)")
	cmd.Flags().DurationVar(&jo.CheckpointDelay, "checkpoint-delay", 2*time.Second, "how long the simulated Job takes to save its work")
	cmd.Flags().BoolVar(&jo.Shrinkable, "shrinkable", false, "one Pod of the Job may move alone")
	return cmd
}

func newSimHealthCmd(g *globals) *cobra.Command {
	var k kubeFlags
	var devFlag, healthFlag, message, podFlag, cdi, fault string
	var xid int
	var rowRemap bool
	var recovery string
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Set a device's fault state in the simulated driver and write its health into every pod holding it, as kubelet would",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			id, err := device.ParseID(devFlag)
			if err != nil {
				return fmt.Errorf("--device: %w", err)
			}
			h, err := device.ParseHealth(healthFlag)
			if err != nil {
				return fmt.Errorf("--health: %w (want Healthy, Unhealthy or Unknown)", err)
			}
			if fault != "" && !slices.Contains(sim.FaultKinds, fault) {
				return fmt.Errorf("--fault %q: want one of %v", fault, sim.FaultKinds)
			}
			if fault != "" && h == device.Healthy {
				return fmt.Errorf("--fault %s: a fault is Unhealthy or Unknown, not Healthy", fault)
			}
			if rowRemap {
				// A row-remap failure: nothing but a replacement clears it, and dcgm-exporter shows it.
				if fault != "" && fault != sim.FaultPermanent {
					return fmt.Errorf("--row-remap-failure is a permanent fault, not %s", fault)
				}
				fault, message = sim.FaultPermanent, sim.RowRemapFailure
			}
			if xid < 0 || xid > 1000 {
				return fmt.Errorf("--xid %d: want an XID from 1 to 1000 (0: none)", xid)
			}
			action := -1
			if recovery != "" {
				if action = recoveryNumber(recovery); action < 0 {
					return fmt.Errorf("--recovery-action %q: want NVML's number or name (none, gpu-reset, node-reboot, drain-p2p, drain-and-reset)", recovery)
				}
			}
			if !slices.Contains(sim.CDIStyles, sim.CDIStyle(cdi)) {
				return fmt.Errorf("--cdi %q: want one of %v", cdi, sim.CDIStyles)
			}
			if id.DevicePlugin() {
				ns, pod, ok := strings.Cut(podFlag, "/")
				if !ok || ns == "" || pod == "" {
					return fmt.Errorf("--pod <namespace>/<name> is required for a device-plugin device: only kubelet knows which pod got %s", id.Device)
				}
				cs, err := k.client(g)
				if err != nil {
					return err
				}
				if err := sim.SetPluginHealth(c.Context(), cs, ns, pod, id.Device, corev1.ResourceHealthStatus(h), message); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "device-plugin device %s is %s in pod %s\n", id, h, podFlag)
				return nil
			}
			cs, err := k.client(g)
			if err != nil {
				return err
			}
			// The driver keeps the fault: Pods that run on the device later (probes, canaries) fail
			// until it is reported Healthy again.
			if err := sim.SetFaultKind(c.Context(), cs, id, corev1.ResourceHealthStatus(h), message, fault); err != nil {
				return err
			}
			if xid > 0 {
				// The GPU raised an XID: the simulated dcgm-exporter shows it from now on.
				if err := sim.SetXID(c.Context(), cs, id, xid); err != nil {
					return err
				}
			}
			if action >= 0 {
				// The driver's verdict: the simulated dcgm-exporter shows it until a reset (a GPU
				// reset's) or a reboot clears it.
				if err := sim.SetRecoveryAction(c.Context(), cs, id, action); err != nil {
					return err
				}
			}
			targets, err := sim.Targets(c.Context(), cs, id)
			if err != nil {
				return err
			}
			if len(targets) == 0 {
				fmt.Fprintf(c.OutOrStdout(), "device %s is %s (no pod holds it; Pods that run on it later see this)\n", id, h)
				return nil
			}
			for _, t := range targets {
				if err := sim.WriteHealth(c.Context(), cs, t, sim.ResourceID(sim.CDIStyle(cdi), id, t.ClaimUID), corev1.ResourceHealthStatus(h), message); err != nil {
					return err
				}
			}
			fmt.Fprintf(c.OutOrStdout(), "device %s is %s in %s container status(es)\n", id, h, strconv.Itoa(len(targets)))
			return nil
		},
	}
	k.add(cmd)
	cmd.Flags().StringVar(&devFlag, "device", "", "device as <driver>/<pool>/<device>")
	cmd.Flags().StringVar(&healthFlag, "health", "", "Healthy, Unhealthy or Unknown")
	cmd.Flags().StringVar(&message, "message", "", "driver message")
	cmd.Flags().StringVar(&cdi, "cdi", string(sim.CDIClaimDevice), "how the resourceID names the device (claim-device, device, uuid, canonical, opaque), as different drivers do")
	cmd.Flags().StringVar(&fault, "fault", "", "what clears the fault: transient (the driver's reset tool, image "+sim.ResetImage+"), reboot (a node reboot), permanent (nothing); default: only --health Healthy")
	cmd.Flags().StringVar(&podFlag, "pod", "", "for a device-plugin device: the pod (<namespace>/<name>) it is allocated to")
	cmd.Flags().BoolVar(&rowRemap, "row-remap-failure", false, "the GPU's row remapping failed (a permanent fault), which the simulated dcgm-exporter's DCGM_FI_DEV_ROW_REMAP_FAILURE shows")
	cmd.Flags().IntVar(&xid, "xid", 0, "the GPU also raises this XID, which the simulated dcgm-exporter's DCGM_FI_DEV_XID_ERRORS shows (and keeps, as DCGM does)")
	cmd.Flags().StringVar(&recovery, "recovery-action", "", "the driver's recovery action for the GPU (none, gpu-reset, node-reboot, ... or NVML's number), which the simulated dcgm-exporter's DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION shows")
	_ = cmd.MarkFlagRequired("device")
	_ = cmd.MarkFlagRequired("health")
	return cmd
}

// recoveryNumber is NVML's number of a recovery action given by number or name; -1 when it names
// none.
func recoveryNumber(s string) int {
	r, ok := cause.ParseRecovery(s)
	if !ok {
		return -1
	}
	for n := 0; ; n++ {
		got, ok := cause.RecoveryOf(n)
		if !ok {
			return -1
		}
		if got == r {
			return n
		}
	}
}
