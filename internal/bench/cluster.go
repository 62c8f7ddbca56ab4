package bench

import (
	"context"
	"io"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/app"
	"github.com/devicewarden/devicewarden/internal/localcluster"
)

// startCluster starts a fresh local cluster under dir and returns an admin client with the given rate limits.
func startCluster(ctx context.Context, dir, cacheDir string, out io.Writer, apiServerOnly bool, qps float32, burst int) (*localcluster.Cluster, kubernetes.Interface, error) {
	cl, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(dir, "cluster"),
		Builder: &localcluster.Builder{CacheDir: cacheDir, Out: out}, Out: out, APIServerOnly: apiServerOnly})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := app.KubeConfig(cl.Kubeconfig)
	if err == nil {
		cfg.QPS, cfg.Burst = qps, burst
		var kube kubernetes.Interface
		if kube, err = kubernetes.NewForConfig(cfg); err == nil {
			return cl, kube, nil
		}
	}
	_ = cl.Stop()
	return nil, nil, err
}
