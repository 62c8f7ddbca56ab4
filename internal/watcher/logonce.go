package watcher

import "sync"

// maxLogged caps the keys remembered for logging once; past it the memory starts over (a key
// may then be logged once more), so a churning cluster of broken Pods cannot grow it forever.
const maxLogged = 10000

// logOnce remembers which problems were logged, per Pod, and forgets a Pod's with the Pod.
type logOnce struct {
	mu    sync.Mutex
	byPod map[string]map[string]struct{}
	n     int
}

// first reports whether key has not been logged for pod yet, and remembers it.
func (l *logOnce) first(pod, key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byPod == nil || l.n >= maxLogged {
		l.byPod, l.n = map[string]map[string]struct{}{}, 0
	}
	keys := l.byPod[pod]
	if _, ok := keys[key]; ok {
		return false
	}
	if keys == nil {
		keys = map[string]struct{}{}
		l.byPod[pod] = keys
	}
	keys[key] = struct{}{}
	l.n++
	return true
}

// forget drops a deleted Pod's keys.
func (l *logOnce) forget(pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n -= len(l.byPod[pod])
	delete(l.byPod, pod)
}
