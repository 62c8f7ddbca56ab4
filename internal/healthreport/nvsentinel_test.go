package healthreport

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"text/template"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/devicewarden/devicewarden/internal/device"
)

// nvsentinelValues is the part of NVSentinel's Helm values the example sets.
type nvsentinelValues struct {
	FaultRemediation struct {
		Maintenance struct {
			Actions map[string]struct {
				APIGroup            string `json:"apiGroup"`
				Version             string `json:"version"`
				Kind                string `json:"kind"`
				TemplateFileName    string `json:"templateFileName"`
				ImpactedEntityScope string `json:"impactedEntityScope"`
			} `json:"actions"`
			Templates map[string]string `json:"templates"`
		} `json:"maintenance"`
	} `json:"fault-remediation"`
}

// healthEvent is an NVSentinel HealthEvent in its JSON form (testdata holds them so).
type healthEvent struct {
	NodeName          string   `json:"nodeName"`
	CheckName         string   `json:"checkName"`
	Message           string   `json:"message"`
	IsFatal           bool     `json:"isFatal"`
	IsHealthy         bool     `json:"isHealthy"`
	RecommendedAction string   `json:"recommendedAction"`
	ErrorCode         []string `json:"errorCode"`
	EntitiesImpacted  []struct {
		EntityType  string `json:"entityType"`
		EntityValue string `json:"entityValue"`
	} `json:"entitiesImpacted"`
}

// templateData is what NVSentinel's fault remediation hands a maintenance template, under its
// names: the action's API group and version, the event's ID, the impacted entity's value in the
// action's scope, and the event (its recommended action renders as the enum's name).
type templateData struct {
	ApiGroup, Version, HealthEventID, ImpactedEntityScopeValue string
	HealthEvent                                                healthEvent
}

// render makes the reports NVSentinel would create for an event, one per impacted entity of the
// action's scope (one with an empty value when the event names none).
func render(t *testing.T, v nvsentinelValues, ev healthEvent) []Report {
	t.Helper()
	m := v.FaultRemediation.Maintenance
	action, ok := m.Actions[ev.RecommendedAction]
	if !ok {
		t.Fatalf("no action for %s", ev.RecommendedAction)
	}
	tmpl, err := template.New(action.TemplateFileName).Option("missingkey=error").Parse(m.Templates[action.TemplateFileName])
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, e := range ev.EntitiesImpacted {
		if e.EntityType == action.ImpactedEntityScope {
			values = append(values, e.EntityValue)
		}
	}
	if len(values) == 0 {
		values = []string{""}
	}
	var out []Report
	for _, val := range values {
		var b bytes.Buffer
		if err := tmpl.Execute(&b, templateData{ApiGroup: action.APIGroup, Version: action.Version, HealthEventID: "6752f0c4e1a9b2c3d4e5f607",
			ImpactedEntityScopeValue: val, HealthEvent: ev}); err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b.Bytes(), &obj); err != nil {
			t.Fatalf("the rendered report is not YAML: %v\n%s", err, b.String())
		}
		if obj["apiVersion"] != Group+"/"+Version || obj["kind"] != Kind {
			t.Fatalf("rendered %v %v", obj["apiVersion"], obj["kind"])
		}
		r, err := FromObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// The example's template makes NVSentinel's health events into reports DeviceWarden resolves to
// the one GPU each names: by its UUID on the event's node, with the XID and the recommended action
// as the cause; an event that names no GPU makes a report refused as naming no device.
func TestNVSentinelTemplateNamesOneGPU(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/examples/nvsentinel-fault-remediation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v nvsentinelValues
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	published := []resourcev1.ResourceSlice{slice("gpu.nvidia.com", "gpu-node-7",
		gpu("gpu-0", "GPU-0c4e7d1a-2f3b-4d5e-8a9b-1c2d3e4f5a6b", 0), gpu("gpu-1", "GPU-3b1f5c2e-8a41-4c1b-9d7e-0a5c6f2d9e11", 1),
		gpu("gpu-2", "GPU-9f8e7d6c-5b4a-4938-8271-6a5b4c3d2e1f", 2), gpu("gpu-3", "GPU-77777777-0000-4000-8000-000000000000", 3))}
	on := func(name string) device.ID {
		return device.ID{Driver: "gpu.nvidia.com", Pool: "gpu-node-7", Device: name}
	}
	for _, tt := range []struct {
		file    string
		devices []device.ID
		cause   string
		refused string
	}{
		{"nvsentinel-xid79-one-gpu.json", []device.ID{on("gpu-1")}, "79", ""},
		{"nvsentinel-nvlink-two-gpus.json", []device.ID{on("gpu-0"), on("gpu-2")}, "DCGM_FR_NVLINK_ERROR_THRESHOLD,74", ""},
		{"nvsentinel-no-gpu.json", nil, "48", "names no device"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			var ev healthEvent
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			reports := render(t, v, ev)
			for i, r := range reports {
				s := r.Spec
				if s.Source != "nvsentinel" || s.Health != "Unhealthy" || s.Node != ev.NodeName || s.Cause.Code != tt.cause ||
					s.Cause.RecommendedAction != ev.RecommendedAction || s.Message != ev.Message {
					t.Fatalf("report %+v", s)
				}
				id, err := Resolve(s, published)
				if tt.refused != "" {
					if err == nil || !strings.Contains(err.Error(), tt.refused) {
						t.Fatalf("resolved %v, %v; want refused %q", id, err, tt.refused)
					}
					continue
				}
				if err != nil || i >= len(tt.devices) || id != tt.devices[i] {
					t.Fatalf("report %d resolved to %v, %v; want %v", i, id, err, tt.devices)
				}
			}
			if tt.refused == "" && len(reports) != len(tt.devices) {
				t.Fatalf("%d reports for %d GPUs", len(reports), len(tt.devices))
			}
		})
	}
}

// The embedded CRD is the chart's, and serves the kind this package reads, with a status of its own.
func TestTheCRDServesTheKind(t *testing.T) {
	chart, err := os.ReadFile("../../deploy/helm/devicewarden/crds/devicehealthreports.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chart, crd) {
		t.Fatal("deploy/helm/devicewarden/crds/devicehealthreports.yaml differs from internal/healthreport/crd.yaml: copy it over")
	}
	b, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Metadata struct{ Name string } `json:"metadata"`
		Spec     struct {
			Group string `json:"group"`
			Scope string `json:"scope"`
			Names struct {
				Plural, Kind string
			} `json:"names"`
			Versions []struct {
				Name         string         `json:"name"`
				Subresources map[string]any `json:"subresources"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Name != Resource+"."+Group || c.Spec.Group != Group || c.Spec.Scope != "Cluster" || c.Spec.Names.Plural != Resource ||
		c.Spec.Names.Kind != Kind || len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != Version || c.Spec.Versions[0].Subresources["status"] == nil {
		t.Fatalf("CRD %+v", c)
	}
}
