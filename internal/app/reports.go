package app

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/healthreport"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
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
	return kubeobj.InstallCRD(ctx, kube, body, healthreport.Group+"/"+healthreport.Version, healthreport.Resource)
}
