package remediation

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/devicewarden/devicewarden/internal/kubeobj"
)

// EndNodeStep clears what a node step of this device's workflow left on its node when the step
// cannot clear it itself: its activity failed outright (every attempt erred after the remediator's
// object was created), or the quarantine ended while the step was moving the node's holders (a
// person deleted the device's rule). It deletes the workflow's remediator objects for the node,
// lifts the workflow's fences of the node and of a reset's domain (a reset that moved its
// domain's holders), and gives the node's permit and a domain's reset permit back if this device
// holds them. Each part is done even when another fails; the errors come back together.
func (a *Activities) EndNodeStep(ctx context.Context, in NodeInput) error {
	if in.Node == "" {
		return nil
	}
	var errs []error
	if in.Step.Template != "" {
		errs = append(errs, (nodeSteps{a}).deleteOwnNodeObjects(ctx, in))
	}
	errs = append(errs, (nodeSteps{a}).unfenceNode(ctx, in.Node, in.WorkflowID), (domains{a}).unfenceDomain(ctx, in.Node, in.WorkflowID))
	(domains{a}).freeDomainPermits(ctx, in.WorkflowID)
	(permitBook{a}).releaseNode(in.Node, in.Device)
	return errors.Join(errs...)
}

// deleteOwnNodeObjects deletes the remediator objects this device's workflow wrote for the node.
func (v nodeSteps) deleteOwnNodeObjects(ctx context.Context, in NodeInput) error {
	obj, err := in.Step.Object(nodeVars(in))
	if err != nil {
		return nil // a template that does not render made no object
	}
	objs, _, err := v.remediatorObjects(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return nil // no API serves the kind: there is no object of it
	}
	list, err := objs.List(ctx, metav1.ListOptions{LabelSelector: kubeobj.NodeSelector(in.Node)})
	if err != nil {
		return fmt.Errorf("list node steps of node %s: %w", in.Node, err)
	}
	for _, o := range list.Items {
		if !kubeobj.OnNode(o.GetLabels(), o.GetAnnotations(), in.Node) || o.GetAnnotations()[kubeobj.AnnotationWorkflow] != in.WorkflowID {
			continue
		}
		if err := objs.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}
