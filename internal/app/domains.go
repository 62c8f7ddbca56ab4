package app

import (
	"context"
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// checkDomains says, as the process starts, when a reset domain names an attribute none of its
// driver's published devices has (policy.Set.CheckDomains): each of those devices is reset alone,
// as a device that does not publish the attribute is. It warns and starts: a fleet whose nodes
// with the attribute (its baseboards, its hives) are not up yet must not crash-loop its controller,
// and a restart during such a bring-up did, on the e2e stack. Slices that cannot be listed now are
// not judged.
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
	if err := set.CheckDomains(published); err != nil {
		logger.Error("a reset domain names an attribute no published device has: until one does, each device is reset alone", "error", err)
	}
	return nil
}
