// Package device names accelerator devices and their health the same way in every part of DeviceWarden.
package device

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// ID identifies a device. For DRA it is what the scheduler uses: driver, pool and device name.
// For a device-plugin device, Driver is the extended resource name (which always contains a "/"),
// Pool the node and Device the plugin's device ID.
type ID struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

// String is the canonical "<driver>/<pool>/<device>" form.
func (id ID) String() string { return id.Driver + "/" + id.Pool + "/" + id.Device }

// Valid reports whether all three parts are set; only a device-plugin resource name (the driver
// part) may contain a slash.
func (id ID) Valid() bool {
	return id.Driver != "" && id.Pool != "" && id.Device != "" &&
		!strings.Contains(id.Pool, "/") && !strings.Contains(id.Device, "/") && strings.Count(id.Driver, "/") <= 1
}

// DevicePlugin reports whether the device is a device-plugin device (an extended resource).
func (id ID) DevicePlugin() bool { return strings.Contains(id.Driver, "/") }

// ParseID parses the canonical form typed by a person (CLI flags): <driver>/<pool>/<device>, or
// <resource-domain>/<resource>/<node>/<device-id> for a device-plugin device. Health reports from
// kubelet are never parsed this way: they are resolved through the claim's allocation.
func ParseID(s string) (ID, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 && len(parts) != 4 {
		return ID{}, fmt.Errorf("device %q: want <driver>/<pool>/<device> or <domain>/<resource>/<node>/<device-id>", s)
	}
	n := len(parts)
	id := ID{Driver: strings.Join(parts[:n-2], "/"), Pool: parts[n-2], Device: parts[n-1]}
	if !id.Valid() || parts[0] == "" {
		return ID{}, fmt.Errorf("device %q: driver, pool and device must all be non-empty", s)
	}
	return id, nil
}

// WorkflowID is the business key of the device's health workflow.
func (id ID) WorkflowID() string { return "device/" + id.String() }

// TaintRuleName is the deterministic DeviceTaintRule name for this device, so that a repeated
// quarantine finds the existing rule instead of creating a second one.
func (id ID) TaintRuleName() string {
	sum := sha256.Sum256([]byte(id.String()))
	return "devicewarden-" + dnsLabel(id.Device, 30) + "-" + hex.EncodeToString(sum[:])[:16]
}

// dnsLabel lowercases s and keeps only characters valid in a DNS label, cut to max.
func dnsLabel(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= max {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		return "device"
	}
	return out
}

// Health is a device's reported health, as in the Pod API.
type Health string

// The three values the Pod API allows.
const (
	Healthy   Health = "Healthy"
	Unhealthy Health = "Unhealthy"
	Unknown   Health = "Unknown"
)

// ParseHealth accepts exactly the API's values; anything else is an error the caller counts.
func ParseHealth(s string) (Health, error) {
	switch h := Health(s); h {
	case Healthy, Unhealthy, Unknown:
		return h, nil
	}
	return "", fmt.Errorf("unknown health value %q", s)
}

// Severity orders health so the worst report wins: Unhealthy > Unknown > Healthy.
func (h Health) Severity() int {
	switch h {
	case Unhealthy:
		return 2
	case Unknown:
		return 1
	}
	return 0
}
