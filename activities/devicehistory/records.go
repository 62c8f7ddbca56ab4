// Package devicehistory keeps a device's history outside its workflow run (decision 0008): the closed
// quarantines and application faults that later runs count, in one ConfigMap per node in
// DeviceWarden's namespace, devicewarden-history-<node>, one JSON entry per device.
package devicehistory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/kubeobj"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// Activities read and write the records. The worker builds it once.
type Activities struct {
	Kube kubernetes.Interface
	// OwnNamespace is DeviceWarden's own namespace, where the records live (default "default").
	OwnNamespace string
}

// ReadInput names the device whose history a run recalls.
type ReadInput struct {
	Node   string    `json:"node"`
	Device device.ID `json:"device"`
}

// WriteInput is a device's history as its run leaves it. Keep is how far back the device's
// application faults count (its policy's window); Now is the run's time.
type WriteInput struct {
	Node    string         `json:"node"`
	Device  device.ID      `json:"device"`
	History decide.History `json:"history"`
	Now     time.Time      `json:"now"`
}

// ReadDeviceHistory is the device's entry in its node's record; none is an empty history.
func (a *Activities) ReadDeviceHistory(ctx context.Context, in ReadInput) (decide.History, error) {
	cm, err := a.Kube.CoreV1().ConfigMaps(kubeobj.Own(a.OwnNamespace)).Get(ctx, kubeobj.HistoryName(in.Node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return decide.History{}, nil
	}
	if err != nil {
		return decide.History{}, fmt.Errorf("get history %s: %w", kubeobj.HistoryName(in.Node), err)
	}
	entries, err := decode(cm)
	if err != nil {
		// A record someone broke by hand is no reason to stop fencing: the device counts from
		// zero, as it would with no record; the next write keeps the broken text aside.
		slog.WarnContext(ctx, "device history unreadable: the device counts from zero", "configmap", cm.Name, "error", err)
		return decide.History{}, nil
	}
	return entries[in.Device.String()], nil
}

// WriteDeviceHistory puts the device's entry into its node's record, creating the record the
// first time; other devices' entries are pruned of what no policy counts any more (their
// application faults are kept for policy.RelapseWindow, the longest any record keeps). An empty
// history removes the device's entry, and a record left empty is deleted. A conflict with
// another device's write fails the attempt: the activity's retry reads again.
func (a *Activities) WriteDeviceHistory(ctx context.Context, in WriteInput) error {
	cms := a.Kube.CoreV1().ConfigMaps(kubeobj.Own(a.OwnNamespace))
	name := kubeobj.HistoryName(in.Node)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	found := err == nil
	switch {
	case apierrors.IsNotFound(err):
		if in.History.Empty() {
			return nil
		}
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubeobj.Own(a.OwnNamespace),
			Labels:      map[string]string{kubeobj.LabelManagedBy: kubeobj.ManagedBy, kubeobj.LabelHistory: "true"},
			Annotations: map[string]string{kubeobj.AnnotationHistoryNode: in.Node}}}
	case err != nil:
		return fmt.Errorf("get history %s: %w", name, err)
	}
	entries, err := decode(cm)
	var unreadable string
	if err != nil {
		// Kept under its own key, where an operator finds it; the entries start anew.
		unreadable, entries = cm.Data[kubeobj.HistoryKey], map[string]decide.History{}
	}
	next := map[string]decide.History{}
	for id, h := range entries {
		if h = h.Pruned(in.Now, policy.RelapseWindow); !h.Empty() {
			next[id] = h
		}
	}
	if in.History.Empty() {
		delete(next, in.Device.String())
	} else {
		next[in.Device.String()] = in.History
	}
	if found && unreadable == "" && maps.EqualFunc(next, entries, decide.History.Equal) {
		return nil
	}
	if len(next) == 0 && unreadable == "" && cm.Data[kubeobj.HistoryUnreadableKey] == "" {
		if !found {
			return nil
		}
		err := cms.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete history %s: %w", name, err)
		}
		return nil
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("encode history %s: %w", name, err)
	}
	data := map[string]string{kubeobj.HistoryKey: string(raw)}
	if kept := cmp.Or(unreadable, cm.Data[kubeobj.HistoryUnreadableKey]); kept != "" {
		data[kubeobj.HistoryUnreadableKey] = kept
	}
	cm.Data = data
	if !found {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: kubeobj.FieldManager})
	} else {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: kubeobj.FieldManager})
	}
	if err != nil {
		return fmt.Errorf("write history %s: %w", name, err)
	}
	return nil
}

// decode reads a record's entries; a record with no data has none.
func decode(cm *corev1.ConfigMap) (map[string]decide.History, error) {
	entries := map[string]decide.History{}
	raw, ok := cm.Data[kubeobj.HistoryKey]
	if !ok || raw == "" {
		return entries, nil
	}
	if err := json.Unmarshal([]byte(raw), &entries); err != nil {
		return nil, fmt.Errorf("decode history %s: %w", cm.Name, err)
	}
	return entries, nil
}
