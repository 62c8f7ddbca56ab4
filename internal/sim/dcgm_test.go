package sim

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/device"
)

// scrape reads the exporter's answer at path as Prometheus would, failing on what it would refuse.
func scrape(t *testing.T, e *Exporter, path string) map[string][]map[string]string {
	t.Helper()
	srv := httptest.NewServer(e)
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: not the text exposition format: %v", path, err)
	}
	out := map[string][]map[string]string{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			l := map[string]string{"value": model.SampleValue(m.GetGauge().GetValue()).String()}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[name] = append(out[name], l)
		}
	}
	return out
}

// The simulated dcgm-exporter serves dcgm-exporter's series for every whole GPU, per node or all,
// and an XID set on a GPU stays (as DCGM's field does) after its fault is healed.
func TestTheSimulatedExporterServesDCGMSeries(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewSimpleClientset(NodeSlice("node-a", 2, false), NodeSlice("node-b", 2, false))
	bad := device.ID{Driver: Driver, Pool: "node-b", Device: "gpu-1"}
	if err := SetXID(ctx, cs, bad, 79); err != nil {
		t.Fatal(err)
	}
	remapped := device.ID{Driver: Driver, Pool: "node-a", Device: "gpu-0"}
	if err := SetFaultKind(ctx, cs, remapped, "Unhealthy", RowRemapFailure, FaultPermanent); err != nil {
		t.Fatal(err)
	}
	e := &Exporter{Kube: cs}
	all := scrape(t, e, "/metrics")
	for _, l := range all["DCGM_FI_DEV_ROW_REMAP_FAILURE"] {
		if want := map[bool]string{true: "1", false: "0"}[l["Hostname"] == "node-a" && l["gpu"] == "0"]; l["value"] != want {
			t.Fatalf("row remap failure %v, want %s", l, want)
		}
	}
	xids := all["DCGM_FI_DEV_XID_ERRORS"]
	if len(xids) != 4 || len(all["DCGM_FI_DEV_ROW_REMAP_FAILURE"]) != 4 {
		t.Fatalf("series %v", all)
	}
	var found bool
	for _, l := range xids {
		if l["dra_device_name"] != "" {
			t.Fatalf("DRA labels without DRA mode: %v", l)
		}
		if l["Hostname"] == "node-b" && l["gpu"] == "1" {
			found = true
			if l["value"] != "79" || l["UUID"] != UUID(bad) || l["err_code"] != "79" {
				t.Fatalf("the XID series %v", l)
			}
		} else if l["value"] != "0" {
			t.Fatalf("another GPU shows an XID: %v", l)
		}
	}
	if !found {
		t.Fatalf("no series for %s: %v", bad, xids)
	}
	one := scrape(t, &Exporter{Kube: cs, DRA: true}, "/nodes/node-a/metrics")["DCGM_FI_DEV_XID_ERRORS"]
	if len(one) != 2 || one[0]["Hostname"] != "node-a" || one[0]["dra_driver_name"] != Driver || one[0]["dra_pool_name"] != "node-a" || !strings.HasPrefix(one[0]["dra_device_name"], "gpu-") {
		t.Fatalf("one node in DRA mode: %v", one)
	}
	srv := httptest.NewServer(e)
	defer srv.Close()
	for _, p := range []string{"/nodes//metrics", "/other", "/nodes/node-a"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}
