package rolloutplan

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// Enforcement is a phase's enforcement proof: before tenants may claim the phase's shared classes,
// load Pods measure one device alone (the baseline) and then shared by Tenants ShareIDs, one of
// them noisy, on each distinct driver version and node type of the phase.
type Enforcement struct {
	// Image and Command run the load. The Pod reads its part from its environment
	// (DEVICEWARDEN_ROLE, _SHARE_FRACTION, _DEMAND_FRACTION, _START_AT, _DURATION) and writes a
	// LoadResult as JSON to its termination message.
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	// Duration is how long each load runs; StartDelay is how long after the Pods are made the
	// contending loads start together.
	Duration   policy.JSONDuration `json:"duration"`
	StartDelay policy.JSONDuration `json:"startDelay"`
	// Timeout bounds one attempt of the whole proof.
	Timeout policy.JSONDuration `json:"timeout"`
	// Tenants is how many load Pods contend on one device, the noisy one among them.
	Tenants int `json:"tenants"`
	// Share is each tenant's request of Capacity (e.g. 8Gi of memory).
	Share    string `json:"share"`
	Capacity string `json:"capacity"`
	// Noisy is how many times its share the noisy tenant tries to use.
	Noisy float64 `json:"noisy"`
	// Tolerance is how far, as a fraction, a tenant's figures may fall from its share of the
	// baseline (throughput below, p99 above) and the noisy tenant's rise above its share.
	Tolerance float64 `json:"tolerance"`
	// Namespace is where the load Pods and their claims run; the phase's admission block lets
	// it through while tenants wait.
	Namespace string `json:"namespace"`
	// Identity are the device attributes that pin the load Pods on one device.
	Identity []string `json:"identity"`
	// NodeType is the node label and DriverVersion the device attribute that split the phase
	// into the groups proved one by one.
	NodeType      string `json:"nodeType"`
	DriverVersion string `json:"driverVersion"`
	// OnUnenforced is what a failed proof leaves: whole-device (the phase is rolled back to the
	// device plugin, its classes refused) or approve (a person may let tenants in, and the classes
	// are labelled soft quota, no QoS).
	OnUnenforced string `json:"onUnenforced"`
}

// What a failed proof offers.
const (
	UnenforcedWholeDevice = "whole-device"
	UnenforcedApprove     = "approve"
)

// Defaults of an enforcement proof.
const (
	DefaultProofNamespace   = "devicewarden-proof"
	DefaultProofTenants     = 3
	DefaultProofNoisy       = 4
	DefaultProofTolerance   = 0.1
	DefaultProofDuration    = time.Minute
	DefaultProofStartDelay  = 15 * time.Second
	DefaultProofCapacity    = "memory"
	DefaultProofNodeType    = "node.kubernetes.io/instance-type"
	DefaultProofDriverVer   = "driverVersion"
	DefaultProofIdentityKey = "uuid"
)

type enforcementFile struct {
	Image         string   `yaml:"image"`
	Command       []string `yaml:"command"`
	Duration      string   `yaml:"duration"`
	StartDelay    string   `yaml:"startDelay"`
	Timeout       string   `yaml:"timeout"`
	Tenants       int      `yaml:"tenants"`
	Share         string   `yaml:"share"`
	Capacity      string   `yaml:"capacity"`
	Noisy         float64  `yaml:"noisy"`
	Tolerance     *float64 `yaml:"tolerance"`
	Namespace     string   `yaml:"namespace"`
	Identity      []string `yaml:"identity"`
	NodeType      string   `yaml:"nodeType"`
	DriverVersion string   `yaml:"driverVersion"`
	OnUnenforced  string   `yaml:"onUnenforced"`
}

func (f *enforcementFile) check() (*Enforcement, error) {
	if f == nil {
		return nil, nil
	}
	e := &Enforcement{Image: f.Image, Command: f.Command, Tenants: f.Tenants, Share: f.Share, Capacity: f.Capacity, Noisy: f.Noisy,
		Tolerance: DefaultProofTolerance, Namespace: f.Namespace, Identity: f.Identity, NodeType: f.NodeType,
		DriverVersion: f.DriverVersion, OnUnenforced: f.OnUnenforced}
	if e.Image == "" {
		return nil, errors.New("image is required: the load the proof runs")
	}
	durations := []struct {
		key, in string
		def     time.Duration
		out     *policy.JSONDuration
	}{{"duration", f.Duration, DefaultProofDuration, &e.Duration}, {"startDelay", f.StartDelay, DefaultProofStartDelay, &e.StartDelay}, {"timeout", f.Timeout, 0, &e.Timeout}}
	for _, d := range durations {
		*d.out = policy.JSONDuration(d.def)
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%s %q: want a positive duration such as 30s", d.key, d.in)
		}
		*d.out = policy.JSONDuration(v)
	}
	// Two stages, each waiting for its start and running its load, and room to schedule.
	least := 2 * (e.Duration.D() + e.StartDelay.D())
	if e.Timeout == 0 {
		e.Timeout = policy.JSONDuration(least + 5*time.Minute)
	} else if e.Timeout.D() <= least {
		return nil, fmt.Errorf("timeout %s: want more than two stages of startDelay plus duration (%s)", e.Timeout, least)
	}
	if e.Tenants == 0 {
		e.Tenants = DefaultProofTenants
	}
	if e.Tenants < 2 {
		return nil, fmt.Errorf("tenants %d: want at least 2, the noisy one and one at its share", e.Tenants)
	}
	if e.Share == "" {
		return nil, errors.New("share is required: each tenant's request of the capacity, e.g. 8Gi")
	}
	if q, err := resource.ParseQuantity(e.Share); err != nil || q.Sign() <= 0 {
		return nil, fmt.Errorf("share %q: want a positive quantity such as 8Gi", e.Share)
	}
	if e.Capacity == "" {
		e.Capacity = DefaultProofCapacity
	}
	if e.Noisy == 0 {
		e.Noisy = DefaultProofNoisy
	}
	if !(e.Noisy > 1) { // NaN too
		return nil, fmt.Errorf("noisy %v: want more than 1 (times its share the noisy tenant tries to use)", e.Noisy)
	}
	if f.Tolerance != nil {
		e.Tolerance = *f.Tolerance
	}
	if !(e.Tolerance >= 0 && e.Tolerance < 1) {
		return nil, fmt.Errorf("tolerance %v: want a fraction from 0 to below 1", e.Tolerance)
	}
	if e.Namespace == "" {
		e.Namespace = DefaultProofNamespace
	}
	if len(e.Identity) == 0 {
		e.Identity = []string{DefaultProofIdentityKey}
	}
	if e.NodeType == "" {
		e.NodeType = DefaultProofNodeType
	}
	if e.DriverVersion == "" {
		e.DriverVersion = DefaultProofDriverVer
	}
	switch e.OnUnenforced {
	case "":
		e.OnUnenforced = UnenforcedWholeDevice
	case UnenforcedWholeDevice, UnenforcedApprove:
	default:
		return nil, fmt.Errorf("onUnenforced %q: want whole-device or approve", e.OnUnenforced)
	}
	return e, nil
}

// SharedClasses are the classes a phase makes shared, or every class when the phase asks for a
// proof and marks none.
func (ph Phase) SharedClasses() []Class {
	var out []Class
	for _, c := range ph.Classes {
		if c.Shared {
			out = append(out, c)
		}
	}
	if len(out) == 0 && ph.Enforcement != nil {
		return ph.Classes
	}
	return out
}

// SharedClassNames names the classes SharedClasses lists.
func (ph Phase) SharedClassNames() []string {
	return Phase{Classes: ph.SharedClasses()}.ClassNames()
}
