package workflows

import (
	"context"
	"errors"
	"sync"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/devicewarden/devicewarden/activities/devicehistory"
	"github.com/devicewarden/devicewarden/activities/hygiene"
	"github.com/devicewarden/devicewarden/activities/migration"
	"github.com/devicewarden/devicewarden/activities/remediation"
	"github.com/devicewarden/devicewarden/activities/rollouts"
	"github.com/devicewarden/devicewarden/internal/decide"
)

// registerActivities registers every domain's activities (empty: each test mocks what it runs),
// and device history records in memory of their own, which it returns.
func registerActivities(env *testsuite.TestWorkflowEnvironment) *historyStore {
	return registerActivitiesWith(env, newHistoryStore())
}

// registerActivitiesWith is registerActivities over the history records s: runs in environments
// of their own (a device's next run) share them.
func registerActivitiesWith(env *testsuite.TestWorkflowEnvironment, s *historyStore) *historyStore {
	env.RegisterActivity(&remediation.Activities{})
	env.RegisterActivity(&migration.Activities{})
	env.RegisterActivity(&rollouts.Activities{})
	env.RegisterActivity(&hygiene.Activities{})
	env.RegisterActivity(&devicehistory.Activities{})
	s.mock(env)
	return s
}

func newHistoryStore() *historyStore { return &historyStore{entries: map[string]decide.History{}} }

// historyStore is a test's device history records: what WriteDeviceHistory left, by node and
// device, read back by ReadDeviceHistory. failReads makes that many reads fail first.
type historyStore struct {
	mu            sync.Mutex
	entries       map[string]decide.History
	reads, writes int
	failReads     int
}

func historyKey(node, dev string) string { return node + "|" + dev }

func (s *historyStore) mock(env *testsuite.TestWorkflowEnvironment) {
	env.OnActivity("ReadDeviceHistory", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in devicehistory.ReadInput) (decide.History, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.reads++
			if s.failReads > 0 {
				s.failReads--
				return decide.History{}, errors.New("apiserver unavailable")
			}
			return s.entries[historyKey(in.Node, in.Device.String())], nil
		}).Maybe()
	env.OnActivity("WriteDeviceHistory", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in devicehistory.WriteInput) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.writes++
			if in.History.Empty() {
				delete(s.entries, historyKey(in.Node, in.Device.String()))
				return nil
			}
			s.entries[historyKey(in.Node, in.Device.String())] = in.History
			return nil
		}).Maybe()
}

// entry is the device's history as the records hold it.
func (s *historyStore) entry(node, dev string) decide.History {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[historyKey(node, dev)]
}
