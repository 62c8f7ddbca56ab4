package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// scripted is a list/watch endpoint that answers from a script and records what it was asked.
type scripted struct {
	mu        sync.Mutex
	listFails int
	lists     []metav1.ListOptions
	watches   []string // resourceVersions watched from
	watchers  []*watch.FakeWatcher
}

func (s *scripted) list(_ context.Context, o metav1.ListOptions) ([]runtime.Object, string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists = append(s.lists, o)
	if s.listFails > 0 {
		s.listFails--
		return nil, "", "", errors.New("apiserver unavailable")
	}
	if o.Continue == "" { // two pages
		return []runtime.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "5"}}}, "", "page-2", nil
	}
	return []runtime.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", ResourceVersion: "7"}}}, "10", "", nil
}

func (s *scripted) watch(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watches = append(s.watches, o.ResourceVersion)
	w := watch.NewFakeWithChanSize(10, false)
	s.watchers = append(s.watchers, w)
	return w, nil
}

func (s *scripted) state() (int, []string, []*watch.FakeWatcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lists), append([]string(nil), s.watches...), append([]*watch.FakeWatcher(nil), s.watchers...)
}

// The source lists page by page (after failed lists), then watches from the list's version, resumes
// a closed watch from the last version it saw, and relists when that version is too old.
func TestSourceListsWatchesAndResumes(t *testing.T) {
	ep := &scripted{listFails: 2}
	var mu sync.Mutex
	var got []string
	relists := 0
	src := &source{name: "pods", list: ep.list, watch: ep.watch, logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		relistBegin: func() {}, relistEnd: func() { mu.Lock(); relists++; mu.Unlock() },
		upsert: func(o runtime.Object, action string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, action+" "+o.(*corev1.Pod).Name)
		},
		remove: func(o runtime.Object) { mu.Lock(); got = append(got, "delete "+o.(*corev1.Pod).Name); mu.Unlock() },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := make(chan struct{})
	done := make(chan struct{})
	go func() { src.run(ctx, synced); close(done) }()
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("not synced after two failed lists")
	}
	waitUntil(t, "first watch", func() bool { _, w, _ := ep.state(); return len(w) == 1 })
	lists, watches, ws := ep.state()
	if lists != 4 || watches[0] != "10" {
		t.Fatalf("%d list calls (2 failed, 2 pages), watched from %q", lists, watches[0])
	}
	ws[0].Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "11"}})
	ws[0].Modify(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "12"}})
	ws[0].Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "13"}})
	ws[0].Stop() // the server closed the watch: resume from the last version seen
	waitUntil(t, "resumed watch", func() bool { _, w, _ := ep.state(); return len(w) == 2 })
	_, watches, ws = ep.state()
	if watches[1] != "13" {
		t.Fatalf("resumed from %q, want 13", watches[1])
	}
	ws[1].Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	waitUntil(t, "relist after Gone", func() bool { l, w, _ := ep.state(); return l == 6 && len(w) == 3 })
	_, watches, _ = ep.state()
	if watches[2] != "10" {
		t.Fatalf("watch after the relist from %q", watches[2])
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := "[add a add b add c update c delete a add a add b]"
	if s := fmt.Sprint(got); s != want || relists != 2 {
		t.Fatalf("handled %s with %d relists, want %s and 2", s, relists, want)
	}
}

func TestPagesPropagatesErrors(t *testing.T) {
	boom := errors.New("forbidden")
	_, _, _, err := pages(func(context.Context, metav1.ListOptions) (*corev1.PodList, error) { return nil, boom })(context.Background(), metav1.ListOptions{})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	items, rv, cont, err := pages(func(context.Context, metav1.ListOptions) (*corev1.PodList, error) {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "more"}, Items: []corev1.Pod{{}, {}}}, nil
	})(context.Background(), metav1.ListOptions{})
	if err != nil || len(items) != 2 || rv != "9" || cont != "more" {
		t.Fatalf("%d items rv %q continue %q err %v", len(items), rv, cont, err)
	}
}
