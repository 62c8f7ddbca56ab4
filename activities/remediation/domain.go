package remediation

import (
	"context"
	"fmt"
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A reset reaches its device's reset domain (policy.Set.ResetDomain): the device alone, every
// device of its driver on its node, or those that share a published attribute (a hive, ring or
// baseboard ID). A reset never starts while a device of its domain is held: it waits, or (holders:
// move) keeps new claims off the domain's other devices and has their holders moved, and it keeps
// those claims off while it runs.

// domainPeers are the devices a reset of id reaches besides id itself, from the driver's slices:
// none for the device alone; every device of its node, or those that publish the value id
// publishes of the domain's attribute. A device id does not publish the attribute for has none.
func domainPeers(published []resourcev1.ResourceSlice, id device.ID, domain string) []device.ID {
	if domain == "" || domain == policy.DomainDevice {
		return nil
	}
	attr, byAttr := policy.DomainAttribute(domain)
	var node, value string
	found, valued := false, false
	for _, s := range published {
		if s.Spec.Pool.Name != id.Pool {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == id.Device {
				found, node = true, ptr.Deref(s.Spec.NodeName, "")
				value, valued = attrValue(d, id.Driver, attr)
			}
		}
	}
	if !found || byAttr && !valued {
		return nil
	}
	var out []device.ID
	for _, s := range published {
		same := ptr.Deref(s.Spec.NodeName, "") == node && node != "" || node == "" && s.Spec.Pool.Name == id.Pool
		if !same {
			continue
		}
		for _, d := range s.Spec.Devices {
			peer := device.ID{Driver: id.Driver, Pool: s.Spec.Pool.Name, Device: d.Name}
			if peer == id || slices.Contains(out, peer) {
				continue
			}
			if v, ok := attrValue(d, id.Driver, attr); byAttr && (!ok || v != value) {
				continue
			}
			out = append(out, peer)
		}
	}
	return out
}

// attrValue is a device's value of attribute name (bare, qualified by its driver's domain, or
// fully qualified), as text.
func attrValue(d resourcev1.Device, driver, name string) (string, bool) {
	v := kubeobj.AttrValue(driver, name, d.Attributes)
	return v, v != ""
}

// fenceDomain keeps new claims off the domain's other devices while a reset waits for their
// holders and runs: one DeviceTaintRule (NoSchedule, key kubeobj.TaintDomainReset) per peer,
// owned by the resetting workflow. A fence already there is left as it is.
func (v domains) fenceDomain(ctx context.Context, in CheckInput, node string, peers []device.ID) error {
	a := v.a
	for _, p := range peers {
		labels := map[string]string{kubeobj.LabelDriver: kubeobj.LabelValue(p.Driver), kubeobj.LabelPool: kubeobj.LabelValue(p.Pool)}
		ann := map[string]string{kubeobj.AnnotationWorkflow: in.WorkflowID, kubeobj.AnnotationDevice: in.Device.String(), kubeobj.AnnotationActor: "devicewarden",
			kubeobj.AnnotationReason: fmt.Sprintf("a reset of %s reaches %s (its reset domain %s): new claims wait until it ends", in.Device, p, in.Domain)}
		kubeobj.NodeLabels(labels, ann, node)
		rule := &resourcev1.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{Name: domainFenceName(p), Labels: labels, Annotations: ann},
			Spec: resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(p.Driver), Pool: ptr.To(p.Pool), Device: ptr.To(p.Device)},
				Taint:          resourcev1.DeviceTaint{Key: kubeobj.TaintDomainReset, Value: "true", Effect: a.effect(resourcev1.DeviceTaintEffectNoSchedule)},
			},
		}
		if _, err := a.Kube.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{FieldManager: kubeobj.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("fence %s for the reset of %s: %w", p, in.Device, err)
		}
	}
	return nil
}

// unfenceDomain deletes workflowID's domain fences on node: the reset ended, or its quarantine did.
func (v domains) unfenceDomain(ctx context.Context, node, workflowID string) error {
	a := v.a
	rules := a.Kube.ResourceV1().DeviceTaintRules()
	list, err := rules.List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(node)})
	if err != nil {
		return fmt.Errorf("list the domain fences of node %s: %w", node, err)
	}
	for _, r := range list.Items {
		if r.Spec.Taint.Key != kubeobj.TaintDomainReset || !kubeobj.OnNode(r.Labels, r.Annotations, node) || r.Annotations[kubeobj.AnnotationWorkflow] != workflowID {
			continue
		}
		if err := rules.Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("unfence %s: %w", r.Name, err)
		}
	}
	return nil
}

// domainFenceName is the name of the domain fence of one device.
func domainFenceName(id device.ID) string {
	return "devicewarden-domain-" + nameHash(id.String())
}

// claimHolders are the Pods ("namespace/name") whose claims are allocated one of the devices,
// other than own's: the holders a reset that moves its domain's holders has moved.
func (v domains) claimHolders(ctx context.Context, devices []device.ID, own string) ([]string, error) {
	a := v.a
	var out []string
	err := (checkPods{a}).claimsOn(ctx, devices, own, func(c resourcev1.ResourceClaim, _ device.ID) bool {
		for _, ref := range c.Status.ReservedFor {
			if p := c.Namespace + "/" + ref.Name; ref.Resource == "pods" && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return true
	})
	return out, err
}
