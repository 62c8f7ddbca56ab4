//go:build e2e

// Package e2e runs the activities against a real local cluster (etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager and kwok): the parts of the activities that only the
// real API server's admission, validation and controllers can answer. No workflow drives them here;
// internal/e2e runs them under DeviceWarden's workflows.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// kube is the shared cluster's clientset; each test works in names of its own.
var kube kubernetes.Interface

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("activities e2e: skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "devicewarden-activities-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cl, err := localcluster.Start(context.Background(), localcluster.Options{
		Dir:     filepath.Join(dir, "cluster"),
		Builder: &localcluster.Builder{CacheDir: localcluster.DefaultCacheDir(), Out: os.Stderr},
		Out:     os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start cluster:", err)
		return 1
	}
	defer cl.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cl.Kubeconfig)
	if err == nil {
		kube, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube client:", err)
		return 1
	}
	return m.Run()
}
