// Package cause reads why a device failed from what its sources say (an XID in a driver's
// message, dcgm-exporter's code, a detector's recommended action, the driver's recovery action)
// and chooses the repair step a fault of that cause starts at. It does no I/O.
package cause

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// Cause is what made one fault, as its sources say it.
type Cause struct {
	// Code is the source's code: "xid:79", "row-remap-failure", "recovery-action:2", a node
	// condition's type.
	Code string `json:"code,omitempty"`
	// XID is the driver's error number (0: none was said).
	XID int `json:"xid,omitempty"`
	// PCI is the GPU's PCI address when the message gave it ("0000:3b:00").
	PCI string `json:"pci,omitempty"`
	// Recovery is the driver's own verdict for the GPU (NVML's GPU recovery action).
	Recovery Recovery `json:"recovery,omitempty"`
	// Action is the detector's recommended action as it wrote it ("COMPONENT_RESET").
	Action string `json:"action,omitempty"`
}

// Known says whether the sources said anything of the cause.
func (c Cause) Known() bool { return c != Cause{} }

// Class is the cause as a metric's label: "xid 48", the source's code ("row-remap-failure",
// "recovery-action:2", a node condition's type), the driver's recovery action, the detector's
// action, or "unknown". Bounded by what the sources say: no PCI address, no message.
func (c Cause) Class() string {
	switch {
	case c.XID > 0:
		return "xid " + strconv.Itoa(c.XID)
	case c.Code != "":
		return c.Code
	case c.Recovery != "":
		return "recovery " + string(c.Recovery)
	case c.Action != "":
		return strings.ToLower(c.Action)
	}
	return "unknown"
}

// String is the cause in one line, for records and pages: "xid 79 (PCI 0000:3b:00), recovery node-reboot".
func (c Cause) String() string {
	var parts []string
	switch {
	case c.XID > 0:
		s := "xid " + strconv.Itoa(c.XID)
		if c.PCI != "" {
			s += " (PCI " + c.PCI + ")"
		}
		parts = append(parts, s)
	case c.Code != "":
		parts = append(parts, c.Code)
	}
	if c.Recovery != "" {
		parts = append(parts, "recovery "+string(c.Recovery))
	}
	if c.Action != "" {
		parts = append(parts, "recommended "+c.Action)
	}
	return strings.Join(parts, ", ")
}

// Recovery is NVML's GPU recovery action (DCGM field 1523), the driver's verdict on what brings
// the GPU back.
type Recovery string

// The recovery actions, by NVML's numbers 0 to 7.
const (
	RecoveryNone          Recovery = "none"
	RecoveryGPUReset      Recovery = "gpu-reset"
	RecoveryNodeReboot    Recovery = "node-reboot"
	RecoveryDrainP2P      Recovery = "drain-p2p"
	RecoveryDrainAndReset Recovery = "drain-and-reset"
	RecoveryIMEXDomain    Recovery = "recover-imex-domain"
	RecoveryBusReset      Recovery = "bus-reset"
	RecoverySystemReboot  Recovery = "system-reboot"
)

var recoveries = []Recovery{RecoveryNone, RecoveryGPUReset, RecoveryNodeReboot, RecoveryDrainP2P, RecoveryDrainAndReset,
	RecoveryIMEXDomain, RecoveryBusReset, RecoverySystemReboot}

// RecoveryOf is the recovery action of NVML's number; false for a number it does not define.
func RecoveryOf(n int) (Recovery, bool) {
	if n < 0 || n >= len(recoveries) {
		return "", false
	}
	return recoveries[n], true
}

// ParseRecovery reads a recovery action as a source may write it: NVML's number ("2"), its name
// ("node-reboot", "NODE_REBOOT", "NVML_GPU_RECOVERY_ACTION_NODE_REBOOT"); false for anything else.
func ParseRecovery(s string) (Recovery, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil {
		return RecoveryOf(n)
	}
	s = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(strings.ToUpper(s), "NVML_"), "GPU_RECOVERY_ACTION_"))
	s = strings.ReplaceAll(s, "_", "-")
	for _, r := range recoveries {
		if string(r) == s {
			return r, true
		}
	}
	return "", false
}

// xidIn finds an XID in the driver's and the kernel's usual forms: "XID 79", "xid=79", "Xid: 79",
// "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, ...".
var xidIn = regexp.MustCompile(`(?i)\bxid\b\s*(?:\(\s*pci:\s*([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-7])?)\s*\))?\s*[:=#]?\s*(\d{1,4})\b`)

// rowRemapFailed finds a row-remap failure said in words: "row remap failure", "Row Remapper:
// Failed to remap row", "row remapping failed".
var rowRemapFailed = regexp.MustCompile(`(?i)\brow[ -]?remap(?:ping|per)?\s*(?:failure|failed|:\s*failed to remap)|\bfailed to remap (?:a )?row`)

// bareXIDs reads a code that is an XID alone or a comma-separated list of them; none otherwise.
func bareXIDs(code string) []int {
	var out []int
	for part := range strings.SplitSeq(code, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 || n > MaxXID {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// MaxXID bounds the XIDs read: the catalogue's run below 200; a larger number is not an XID.
const MaxXID = 999

// OfCode is the cause a source's code alone says ("xid:79", "recovery-action:2", "79"): what Read
// makes of it without a message.
func OfCode(code string) Cause {
	c := Cause{Code: strings.TrimSpace(code)}
	if xids := bareXIDs(c.Code); len(xids) > 0 {
		// NVSentinel's template writes the XID alone ("79"), or a list ("79,48"): of a list, the
		// one the device needs most.
		c.XID = xids[0]
		for _, x := range xids[1:] {
			if Rank(Cause{XID: x}) > Rank(Cause{XID: c.XID}) {
				c.XID = x
			}
		}
	}
	name, value, _ := strings.Cut(c.Code, ":")
	switch n, err := strconv.Atoi(value); {
	case err != nil:
	case (name == "xid" || name == "xid-count") && n > 0 && n <= MaxXID:
		c.XID = n
	case name == "recovery-action":
		c.Recovery, _ = RecoveryOf(n)
	}
	return c
}

// Read is the cause of one fault from its source's code ("xid:79", "recovery-action:2"), the
// detector's recommended action and its message. What none of them says stays empty.
func Read(code, action, message string) Cause {
	code = strings.TrimSpace(code)
	if code == "" && rowRemapFailed.MatchString(message) {
		code = "row-remap-failure" // said in words by kubelet's or the driver's message
	}
	c := OfCode(code)
	c.Action = strings.ToUpper(strings.TrimSpace(action))
	if m := xidIn.FindStringSubmatch(message); m != nil {
		if n, err := strconv.Atoi(m[2]); err == nil && n > 0 && n <= MaxXID {
			if c.XID == 0 {
				c.XID = n
			}
			if c.XID == n {
				c.PCI = strings.ToLower(m[1])
			}
		}
	}
	if c.XID == 0 {
		c.XID = listed(message)
	}
	return c
}

// listed reads the first XID a node condition lists as JSON ({"31":true}), as GKE's device
// plugin writes its XidCriticalError reason.
func listed(s string) int {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		return 0
	}
	var set map[string]bool
	if json.Unmarshal([]byte(s), &set) != nil {
		return 0
	}
	first := 0
	for k, on := range set {
		if n, err := strconv.Atoi(k); err == nil && on && n > 0 && n <= MaxXID && (first == 0 || n < first) {
			first = n
		}
	}
	return first
}
