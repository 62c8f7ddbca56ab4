package sim

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/device"
)

// AnnotationXIDs holds, on a pool's slice, the last XID each simulated GPU raised (a JSON object
// from device name to XID). Like DCGM's XID field it is never cleared: a repaired GPU still shows
// its last XID.
const AnnotationXIDs = "sim.devicewarden.io/xids"

// SetXID records an XID on the device, as the driver would when the GPU raises it.
func SetXID(ctx context.Context, cs kubernetes.Interface, id device.ID, xid int) error {
	return updateNotes(ctx, cs, id, AnnotationXIDs, func(_ []resourcev1.ResourceSlice, xids map[string]int) bool {
		xids[id.Device] = xid
		return true
	})
}

// Exporter serves the simulated GPUs' metrics as dcgm-exporter does, with its metric names and
// labels: /metrics for every node, /nodes/<node>/metrics for one (a target per node, as a
// DaemonSet's Pods are). With DRA set, each series also carries the DRA labels dcgm-exporter adds
// in its DRA mode (dra_driver_name, dra_pool_name, dra_device_name); without, a series names its
// GPU by UUID, index and Hostname only.
type Exporter struct {
	Kube kubernetes.Interface
	DRA  bool
	// Refresh is how long a read of the slices is served before the next (default 1 s).
	Refresh time.Duration

	mu   sync.Mutex
	gpus []simGPU
	at   time.Time
}

type simGPU struct {
	node, pool, name, uuid string
	index                  int
	xid, recovery          int
	remapFailed            bool
}

func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	node := ""
	if rest, ok := strings.CutPrefix(r.URL.Path, "/nodes/"); ok {
		node, ok = strings.CutSuffix(rest, "/metrics")
		if !ok || node == "" {
			http.NotFound(w, r)
			return
		}
	} else if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	gpus, err := e.read(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	var b strings.Builder
	metric := func(name, help string, value func(simGPU) (string, string)) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, g := range gpus {
			if node != "" && g.node != node {
				continue
			}
			extra, v := value(g)
			fmt.Fprintf(&b, "%s{%s%s} %s\n", name, e.labels(g), extra, v)
		}
	}
	metric("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", func(g simGPU) (string, string) {
		if g.xid == 0 {
			return "", "0"
		}
		return fmt.Sprintf(`,err_code="%d",err_msg="simulated XID %d"`, g.xid, g.xid), strconv.Itoa(g.xid)
	})
	metric("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", func(g simGPU) (string, string) {
		if g.remapFailed {
			return "", "1"
		}
		return "", "0"
	})
	metric("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "The driver's recovery action for the GPU (0 none).", func(g simGPU) (string, string) {
		return "", strconv.Itoa(g.recovery)
	})
	metric("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.", func(simGPU) (string, string) { return "", "0" })
	_, _ = w.Write([]byte(b.String()))
}

// labels are dcgm-exporter's labels of one GPU.
func (e *Exporter) labels(g simGPU) string {
	l := fmt.Sprintf(`gpu="%d",UUID="%s",pci_bus_id="00000000:%02X:00.0",device="nvidia%d",modelName="sim-a100",Hostname="%s"`,
		g.index, g.uuid, 0x10+g.index, g.index, g.node)
	if e.DRA {
		l += fmt.Sprintf(`,dra_driver_name="%s",dra_pool_name="%s",dra_device_name="%s"`, Driver, g.pool, g.name)
	}
	return l
}

// read lists the simulated driver's whole GPUs, at most once per Refresh.
func (e *Exporter) read(ctx context.Context) ([]simGPU, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	every := e.Refresh
	if every <= 0 {
		every = time.Second
	}
	if e.gpus != nil && time.Since(e.at) < every {
		return e.gpus, nil
	}
	var gpus []simGPU
	opts := metav1.ListOptions{FieldSelector: "spec.driver=" + Driver, Limit: 500}
	for {
		l, err := e.Kube.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list the simulated driver's slices: %w", err)
		}
		for i := range l.Items {
			gpus = append(gpus, sliceGPUs(&l.Items[i])...)
		}
		if opts.Continue = l.Continue; opts.Continue == "" {
			break
		}
	}
	sort.Slice(gpus, func(i, j int) bool {
		if gpus[i].node != gpus[j].node {
			return gpus[i].node < gpus[j].node
		}
		return gpus[i].index < gpus[j].index
	})
	e.gpus, e.at = gpus, time.Now()
	return gpus, nil
}

// sliceGPUs are the whole GPUs one slice publishes (a device with an index attribute), with their
// XIDs and fault state.
func sliceGPUs(s *resourcev1.ResourceSlice) []simGPU {
	if s.Spec.NodeName == nil {
		return nil
	}
	xids, faults, recovery := readNotes[int](s, AnnotationXIDs), readFaults(s), readNotes[int](s, AnnotationRecovery)
	var out []simGPU
	for _, d := range s.Spec.Devices {
		idx, ok := d.Attributes[AttrIndex]
		uuid, hasUUID := d.Attributes[AttrUUID]
		if !ok || idx.IntValue == nil || !hasUUID || uuid.StringValue == nil {
			continue
		}
		out = append(out, simGPU{node: *s.Spec.NodeName, pool: s.Spec.Pool.Name, name: d.Name, uuid: *uuid.StringValue,
			index: int(*idx.IntValue), xid: xids[d.Name], recovery: recovery[d.Name], remapFailed: faults[d.Name].Kind == FaultPermanent && faults[d.Name].Message == RowRemapFailure})
	}
	return out
}

// RowRemapFailure is the message of a permanent fault that dcgm-exporter shows as a row-remap
// failure (`sim health --row-remap-failure`).
const RowRemapFailure = "row remapping failed"

// Serve serves the exporter on addr until ctx ends.
func (e *Exporter) Serve(ctx context.Context, addr string) error {
	srv := &http.Server{Addr: addr, Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("simulated dcgm-exporter on %s: %w", addr, err)
	}
	return nil
}
