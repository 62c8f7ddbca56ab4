package kubeobj

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// InstallCRD creates a CustomResourceDefinition (its JSON; one that stands is left as it is) and
// waits until groupVersion serves resource.
func InstallCRD(ctx context.Context, kube kubernetes.Interface, body []byte, groupVersion, resource string) error {
	err := kube.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install the CRD of %s: %w", resource, err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		list, err := kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
		if err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }) {
			return nil
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("%s is not served: %w", resource, wait.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
