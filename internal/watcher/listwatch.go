package watcher

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// listPageSize bounds how many objects are decoded at once during a (re)list.
const listPageSize = 500

// source lists and watches one resource and hands each object to the watcher as it arrives. Unlike
// an informer it keeps no cache: the handlers decide what little to remember, and a list is
// processed page by page, so memory does not grow with the number of objects in the cluster.
type source struct {
	name string
	// list returns one page: its items, the list's resourceVersion and the continue token.
	list  func(ctx context.Context, opts metav1.ListOptions) ([]runtime.Object, string, string, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// relistBegin/relistEnd bracket a full list, so objects that vanished meanwhile can be swept.
	relistBegin func()
	relistEnd   func()
	upsert      func(obj runtime.Object, action string)
	remove      func(obj runtime.Object)
	logger      *slog.Logger
}

// run lists and watches until ctx ends; synced is closed after the first complete list.
func (s *source) run(ctx context.Context, synced chan<- struct{}) {
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		rv, err := s.relist(ctx)
		if err != nil {
			s.logger.Warn("list failed; retrying", "resource", s.name, "error", err, "backoff", backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if first {
			close(synced)
			first = false
		}
		for ctx.Err() == nil {
			next, err := s.watchFrom(ctx, rv)
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					break // too old to resume: relist
				}
				s.logger.Warn("watch failed; resuming", "resource", s.name, "error", err)
				sleep(ctx, time.Second)
			}
			rv = next
		}
	}
}

func (s *source) relist(ctx context.Context) (string, error) {
	s.relistBegin()
	opts := metav1.ListOptions{Limit: listPageSize}
	var rv string
	for {
		items, pageRV, cont, err := s.list(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("list %s: %w", s.name, err)
		}
		for _, o := range items {
			s.upsert(o, "add")
		}
		rv = pageRV
		if cont == "" {
			break
		}
		opts.Continue = cont
	}
	s.relistEnd()
	return rv, nil
}

// watchFrom watches from rv and returns the last resourceVersion seen, to resume from.
func (s *source) watchFrom(ctx context.Context, rv string) (string, error) {
	w, err := s.watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return rv, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			switch ev.Type {
			case watch.Error:
				return rv, apierrors.FromObject(ev.Object)
			case watch.Added, watch.Modified:
				s.upsert(ev.Object, map[watch.EventType]string{watch.Added: "add", watch.Modified: "update"}[ev.Type])
			case watch.Deleted:
				s.remove(ev.Object)
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
		}
	}
}

// pages adapts a typed List call (pods, claims, ...) to a source's list function.
func pages[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) func(context.Context, metav1.ListOptions) ([]runtime.Object, string, string, error) {
	return func(ctx context.Context, o metav1.ListOptions) ([]runtime.Object, string, string, error) {
		l, err := list(ctx, o)
		if err != nil {
			return nil, "", "", err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, "", "", err
		}
		acc, err := meta.ListAccessor(l)
		if err != nil {
			return nil, "", "", err
		}
		return items, acc.GetResourceVersion(), acc.GetContinue(), nil
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
