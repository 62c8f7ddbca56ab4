package console

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// Event is one Kubernetes Event about a device, on its node or on a Pod that holds it.
type Event struct {
	At                            time.Time
	Type, Reason, Message, Object string
}

// Events are the newest Events that name the device (DeviceWarden's decisions, repair tries,
// releases), newest first, at most 50: on its node, and on the Pods that hold it (at most 10).
func (c *KubeCluster) Events(ctx context.Context, node string, id device.ID, holders []devicemsg.Reporter) ([]Event, error) {
	var out []Event
	add := func(ns, kind, name string) error {
		list, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name})
		if err != nil {
			return fmt.Errorf("list the events of %s %s: %w", strings.ToLower(kind), name, err)
		}
		for _, e := range list.Items {
			if !strings.Contains(e.Message, id.String()) {
				continue
			}
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			if at.IsZero() {
				at = e.CreationTimestamp.Time
			}
			out = append(out, Event{At: at, Type: e.Type, Reason: e.Reason, Message: e.Message, Object: kind + " " + name})
		}
		return nil
	}
	if node != "" {
		if err := add(metav1.NamespaceAll, "Node", node); err != nil {
			return nil, err
		}
	}
	for _, h := range holders[:min(len(holders), 10)] {
		if h.Pod == "" {
			continue
		}
		if err := add(h.Namespace, "Pod", h.Pod); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.After(out[j].At) })
	return out[:min(len(out), 50)], nil
}
