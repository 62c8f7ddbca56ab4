package console

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Event is one Kubernetes Event about a device, as its node's Events record it.
type Event struct {
	At                    time.Time
	Type, Reason, Message string
}

// Events are the newest Events on the node that name the device (DeviceWarden's decisions, repair
// tries, releases), newest first, at most 50.
func (c *KubeCluster) Events(ctx context.Context, node string, id device.ID) ([]Event, error) {
	if node == "" {
		return nil, nil
	}
	list, err := c.Kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		return nil, fmt.Errorf("list the events of node %s: %w", node, err)
	}
	var out []Event
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
		out = append(out, Event{At: at, Type: e.Type, Reason: e.Reason, Message: e.Message})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.After(out[j].At) })
	return out[:min(len(out), 50)], nil
}
