// Package kubeobj holds what DeviceWarden writes on Kubernetes objects and the small helpers
// several rooms share about them: the labels, annotations, field manager and Event reasons of the
// objects it owns or marks, the Event writer, and the reads a capacity check or grant record needs.
// The activities, the watcher, the simulator, the Slack app and the CLI use them from here.
package kubeobj

import (
	"cmp"
	"strings"

	"github.com/devicewarden/devicewarden/internal/decide"
)

// Who owns an object, and the taint key of every quarantine.
const (
	TaintKey       = decide.TaintQuarantine
	FieldManager   = "devicewarden"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "devicewarden"
)

// OwnNamespace is DeviceWarden's own namespace when none is configured: where its Leases, evidence,
// grant records and rollout reports live, never in a tenant's.
const OwnNamespace = "default"

// Own is ns, or OwnNamespace when ns is empty.
func Own(ns string) string { return cmp.Or(ns, OwnNamespace) }

// Labels and annotations on DeviceTaintRules.
const (
	LabelDriver = "devicewarden.io/driver"
	LabelPool   = "devicewarden.io/pool"
	LabelDevice = "devicewarden.io/device"
	// LabelUnit marks the rules of one physical unit's forms (a hash of the unit's ID), so the
	// unit's release finds every one of them, a form no longer published included.
	LabelUnit           = "devicewarden.io/unit"
	AnnotationDevice    = "devicewarden.io/device-id"
	AnnotationReason    = "devicewarden.io/reason"
	AnnotationActor     = "devicewarden.io/actor"
	AnnotationWorkflow  = "devicewarden.io/workflow-id"
	AnnotationExpiresAt = "devicewarden.io/expires-at"
	// AnnotationUnit names the physical unit a rule fences one form of (driver/pool/key).
	AnnotationUnit = "devicewarden.io/unit"
	// AnnotationWaiting lists, comma-separated and oldest first, the workflows that also fence the
	// device a rule selects and wait for it: the rule's one owner (AnnotationWorkflow) hands it to
	// the first of them on release instead of deleting it.
	AnnotationWaiting = "devicewarden.io/waiting-workflows"
	// AnnotationHandedOver names the workflow that handed the rule to its owner, and when.
	AnnotationHandedOver = "devicewarden.io/handed-over-from"
	// AnnotationBootID is the node's boot ID when a repair ladder's node step asked its
	// remediator for a reboot (on the remediator's object); AnnotationRepairTry numbers that try.
	AnnotationBootID    = "devicewarden.io/boot-id"
	AnnotationRepairTry = "devicewarden.io/repair-try"
	// ResetPermitPrefix begins the name of a reset domain's permit, a Lease in DeviceWarden's
	// namespace held by the workflow whose reset runs; AnnotationResetOutcome on it says how
	// that reset ended (passed or failed; empty while it runs).
	ResetPermitPrefix      = "devicewarden-reset-"
	AnnotationResetOutcome = "devicewarden.io/reset-outcome"
	// LabelNode marks a node step's object with its node (LabelValue), so a second device of the
	// node finds the remediation under way and waits on it rather than asking for another.
	LabelNode = "devicewarden.io/node"
	// TaintNodeRepair is the taint key of a node fence: while a node step moves the node's other
	// device holders and the node reboots, new claims keep off every device of the node.
	TaintNodeRepair = "devicewarden.io/node-repair"
	// TaintDomainReset is the taint key of a reset domain's fence: while a reset that reaches the
	// device's peers (its driver's resetDomain) waits for their holders and runs, new claims keep
	// off those peers.
	TaintDomainReset = "devicewarden.io/domain-reset"
)

// Labels on probe and canary Pods. LabelCheck names the check (probe Pod or canary Job) an object
// belongs to; the canary Job's Pod carries it too.
const (
	LabelRole   = "devicewarden.io/role"
	LabelReview = "devicewarden.io/review"
	LabelCheck  = "devicewarden.io/check"
)

// How a workload declares itself to migration, in annotations on its Pod template (so on its Pods).
const (
	AnnotationCheckpoint = "devicewarden.io/checkpoint"
	AnnotationShrinkable = "devicewarden.io/shrinkable"
	// CheckpointNone (the default): the workload cannot save its progress on request.
	CheckpointNone = "none"
	// CheckpointAnnotation: the workload's code answers checkpoint-requested=<id> with
	// checkpoint-completed=<id> on its Pods.
	CheckpointAnnotation = "annotation"
)

// The checkpoint handshake: DeviceWarden writes the request on the workload's Pods, the workload's
// own code answers on the same Pods once its progress is saved.
const (
	AnnotationCheckpointRequested = "devicewarden.io/checkpoint-requested"
	AnnotationCheckpointCompleted = "devicewarden.io/checkpoint-completed"
)

// Labels on migration Leases and evidence.
const (
	LabelWorkloadNamespace = "devicewarden.io/workload-namespace"
	LabelWorkloadName      = "devicewarden.io/workload-name"
)

// What a rollout writes. Enable leaves the two annotations on a node it switched, so a retried
// enable (or the rollback) finds what the node was before, whoever's worker runs it. LabelRollout
// names the rollout that owns an object (reports, admission blocks).
const (
	AnnotationRolloutPrevious = "devicewarden.io/rollout-previous-owner"
	AnnotationRolloutDevices  = "devicewarden.io/rollout-plugin-devices"
	LabelRollout              = "devicewarden.io/rollout"
	// LabelProof marks an enforcement proof's load Pods and claims (rollout.phase), and
	// LabelProofStage its stage.
	LabelProof      = "devicewarden.io/proof"
	LabelProofStage = "devicewarden.io/proof-stage"
	// LabelIsolation on a DeviceClass says what its shares are: IsolationSoftQuota when a person
	// let tenants share it although the driver was not proven to enforce the shares.
	LabelIsolation     = "devicewarden.io/isolation"
	IsolationSoftQuota = "soft-quota-no-qos"
	// AnnotationIsolation says, in words, why a class is labelled soft quota.
	AnnotationIsolation = "devicewarden.io/isolation-note"
)

// ReportConfigMap is the name of the ConfigMap that keeps a rollout phase's last gate report.
func ReportConfigMap(rolloutName, phase string) string {
	return "devicewarden-rollout-" + rolloutName + "-" + phase
}

// BlockName is the ValidatingAdmissionPolicy (and binding) that holds a phase's classes.
func BlockName(rolloutName, phase string) string {
	return "devicewarden-rollout-" + rolloutName + "-" + phase
}

// LabelValue turns any name into a valid label value: at most 63 characters of [A-Za-z0-9-_.],
// starting and ending with a letter or digit. The full value is in an annotation.
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.TrimFunc(string(b), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
}
