package app

import (
	"context"
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// checkDomains refuses a policy whose reset domain names an attribute its driver's published
// devices do not have (policy.Set.CheckDomains). Slices that cannot be listed now (the apiserver
// away at start) are not judged: the process starts, and says so.
func checkDomains(ctx context.Context, kube kubernetes.Interface, set *policy.Set, logger *slog.Logger) error {
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		logger.Warn("reset domains not checked against the published devices", "error", err)
		return nil
	}
	published := map[string]policy.Publishes{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			if published[s.Spec.Driver] == nil {
				published[s.Spec.Driver] = policy.Publishes{}
			}
			key := s.Spec.Pool.Name + "/" + d.Name
			for name := range d.Attributes {
				published[s.Spec.Driver][key] = append(published[s.Spec.Driver][key], string(name))
			}
		}
	}
	return set.CheckDomains(published)
}
