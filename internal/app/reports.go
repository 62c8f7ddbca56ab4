package app

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/healthreport"
)

// ReportsClient reads and writes DeviceHealthReports through the kubeconfig at path (the in-cluster
// config when empty).
func ReportsClient(path string) (dynamic.NamespaceableResourceInterface, error) {
	cfg, err := KubeConfig(path)
	if err != nil {
		return nil, err
	}
	// A custom resource travels as JSON.
	cfg.ContentType, cfg.AcceptContentTypes = "", ""
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build the DeviceHealthReport client: %w", err)
	}
	return dyn.Resource(schema.GroupVersionResource{Group: healthreport.Group, Version: healthreport.Version, Resource: healthreport.Resource}), nil
}

// InstallReportCRD installs the DeviceHealthReport CRD, as the chart does, in a cluster DeviceWarden
// runs itself (`dev`, the tests' stacks), and waits until it is served. One that stands is left as
// it is.
func InstallReportCRD(ctx context.Context, kube kubernetes.Interface) error {
	body, err := healthreport.CRD()
	if err != nil {
		return err
	}
	err = kube.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install the %s CRD: %w", healthreport.Kind, err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		list, err := kube.Discovery().ServerResourcesForGroupVersion(healthreport.Group + "/" + healthreport.Version)
		if err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == healthreport.Resource }) {
			return nil
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("the %s CRD is not served: %w", healthreport.Kind, wait.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
