package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// The simulated node remediator's object: a cluster-scoped NodeReboot whose spec.nodeName names
// the node to reboot. A repair ladder's node step creates one from its policy's template.
const (
	RebootGroup    = "sim.devicewarden.io"
	RebootVersion  = "v1"
	RebootKind     = "NodeReboot"
	RebootResource = "nodereboots"
	// AnnotationRebooted marks a NodeReboot the remediator carried out, with when.
	AnnotationRebooted = "sim.devicewarden.io/rebooted"
)

// RebootGVR names the NodeReboot resource.
var RebootGVR = schema.GroupVersionResource{Group: RebootGroup, Version: RebootVersion, Resource: RebootResource}

// rebootCRD is the NodeReboot CustomResourceDefinition.
var rebootCRD = map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
	"metadata": map[string]any{"name": RebootResource + "." + RebootGroup},
	"spec": map[string]any{
		"group": RebootGroup, "scope": "Cluster",
		"names": map[string]any{"plural": RebootResource, "singular": "nodereboot", "kind": RebootKind, "listKind": RebootKind + "List"},
		"versions": []any{map[string]any{"name": RebootVersion, "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
				"spec": map[string]any{"type": "object", "properties": map[string]any{"nodeName": map[string]any{"type": "string"}}},
			}}}}},
	},
}

// Remediator plays a node's remediator: for each NodeReboot it "reboots" the node, as a real
// one would through the node's BMC: the node gets a new boot ID, every Pod on it ends, and the
// faults a reboot clears (reboot and transient) are gone from its devices.
type Remediator struct {
	Kube kubernetes.Interface
	// Poll is how often NodeReboots are looked at (default 200 ms).
	Poll   time.Duration
	Logger *slog.Logger
}

// Run installs the NodeReboot CRD and carries out NodeReboots until ctx ends.
func (r *Remediator) Run(ctx context.Context) error {
	logger := r.Logger
	if logger == nil {
		logger = slog.Default()
	}
	for {
		err := InstallRebootCRD(ctx, r.Kube)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		logger.Warn("sim remediator: no NodeReboot CRD yet; trying again", "error", err)
		time.Sleep(2 * time.Second)
	}
	poll := r.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	objs, err := kubeobj.Dynamic(r.Kube)
	if err != nil {
		return err
	}
	reboots := objs.Resource(RebootGVR)
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		list, err := reboots.List(ctx, metav1.ListOptions{})
		if err != nil && ctx.Err() == nil {
			logger.Warn("sim remediator: list node reboots failed", "error", err)
		}
		for i := 0; list != nil && i < len(list.Items); i++ {
			if err := r.carryOut(ctx, reboots, &list.Items[i]); err != nil && ctx.Err() == nil {
				logger.Warn("sim remediator: reboot failed", "object", list.Items[i].GetName(), "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// InstallRebootCRD creates the NodeReboot CRD (if it is not there) and waits until it is served.
func InstallRebootCRD(ctx context.Context, kube kubernetes.Interface) error {
	body, err := json.Marshal(rebootCRD)
	if err != nil {
		return err
	}
	return kubeobj.InstallCRD(ctx, kube, body, RebootGroup+"/"+RebootVersion, RebootResource)
}

// carryOut reboots the node a NodeReboot names, once.
func (r *Remediator) carryOut(ctx context.Context, reboots dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
	if obj.GetAnnotations()[AnnotationRebooted] != "" || obj.GetDeletionTimestamp() != nil {
		return nil
	}
	node, _, _ := unstructured.NestedString(obj.Object, "spec", "nodeName")
	if node == "" {
		return fmt.Errorf("%s names no spec.nodeName", obj.GetName())
	}
	if err := Reboot(ctx, r.Kube, node); err != nil {
		return err
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationRebooted] = time.Now().UTC().Format(time.RFC3339Nano)
	obj.SetAnnotations(ann)
	_, err := reboots.Update(ctx, obj, metav1.UpdateOptions{})
	return err
}

// Reboot plays a reboot of a simulated node: every Pod on it ends, the faults a reboot clears are
// cleared, and the node comes back with a new boot ID.
func Reboot(ctx context.Context, kube kubernetes.Interface, node string) error {
	pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("list pods on %s: %w", node, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		err := kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("end pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	if err := clearNodeFaults(ctx, kube, node); err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.NodeInfo.BootID = string(uuid.NewUUID())
		_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// clearNodeFaults clears the reboot and transient faults of every pool the node publishes.
func clearNodeFaults(ctx context.Context, kube kubernetes.Interface, node string) error {
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + Driver})
	if err != nil {
		return fmt.Errorf("list resource slices: %w", err)
	}
	pools := map[string]bool{}
	for _, s := range list.Items {
		if s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			pools[s.Spec.Pool.Name] = true
		}
	}
	for i := range list.Items {
		s := &list.Items[i]
		if !pools[s.Spec.Pool.Name] {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := kube.ResourceV1().ResourceSlices().Get(ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			faults, cleared := readFaults(cur), false
			for d, f := range faults {
				if f.Kind == FaultReboot || f.Kind == FaultTransient {
					delete(faults, d)
					cleared = true
				}
			}
			if rebooted := clearRecovery(cur); !cleared && !rebooted {
				return nil
			}
			writeNotes(cur, AnnotationFaults, faults)
			_, err = kube.ResourceV1().ResourceSlices().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("clear faults on %s: %w", s.Name, err)
		}
	}
	return nil
}
