package promsignal

import (
	"github.com/devicewarden/devicewarden/internal/healthreport"
)

// dcgm-exporter's labels that name the GPU a series is about.
const (
	LabelDRADriver = "dra_driver_name"
	LabelDRAPool   = "dra_pool_name"
	LabelDRADevice = "dra_device_name"
	LabelUUID      = "UUID"
	LabelHostname  = "Hostname"
	LabelIndex     = "gpu"
	LabelMIG       = "GPU_I_ID"
)

// Naming is how the driver publishes a GPU's UUID and index (its device attributes).
type Naming struct {
	UUIDAttribute  string
	IndexAttribute string
}

// Device names the device a series is about, as a report would: by dcgm-exporter's DRA labels
// when present, else by its UUID on its node, else by its index on its node. ok is false when
// the labels name no device (no DRA labels, and no Hostname with a UUID or an index).
func (n Naming) Device(labels map[string]string) (spec healthreport.Spec, ok bool) {
	if d, p, name := labels[LabelDRADriver], labels[LabelDRAPool], labels[LabelDRADevice]; d != "" && p != "" && name != "" {
		return healthreport.Spec{Device: &healthreport.DeviceRef{Driver: d, Pool: p, Name: name}}, true
	}
	node := labels[LabelHostname]
	if node == "" {
		return spec, false
	}
	if u := labels[LabelUUID]; u != "" && n.UUIDAttribute != "" {
		return healthreport.Spec{Node: node, Attribute: &healthreport.Attribute{Name: n.UUIDAttribute, Value: u}}, true
	}
	if i := labels[LabelIndex]; i != "" && n.IndexAttribute != "" {
		return healthreport.Spec{Node: node, Attribute: &healthreport.Attribute{Name: n.IndexAttribute, Value: i}}, true
	}
	return spec, false
}

// identity is what makes a series the same GPU's from one answer to the next: the labels that
// name the device, never those that change with its user (pod, namespace, container, claim) or
// its exporter (instance, job), nor the XID gauge's err_code and err_msg, which change with its
// value.
func identity(labels map[string]string, codeLabel string) string {
	id := ""
	for _, k := range []string{LabelDRADriver, LabelDRAPool, LabelDRADevice, LabelUUID, LabelHostname, LabelIndex, LabelMIG} {
		if v := labels[k]; v != "" {
			id += k + "=" + v + ","
		}
	}
	if codeLabel != "" {
		id += codeLabel + "=" + labels[codeLabel]
	}
	return id
}
