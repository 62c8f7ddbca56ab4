package temporalserver

import (
	"testing"
	"time"

	"go.temporal.io/server/common/dynamicconfig"
)

// Search attributes are read fresh from the database for a minute after they change, then from
// the server's caches; the other settings are the fixed ones.
func TestSearchAttributesFreshOnlyAfterAChange(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := newLiveConfig(DynamicConfig(), func() time.Time { return now })
	fresh := func() bool {
		cvs := c.GetValue(forceRefreshKey)
		return len(cvs) == 1 && cvs[0].Value == true
	}
	if !fresh() {
		t.Fatal("not fresh right after start")
	}
	now = now.Add(freshFor - time.Second)
	if !fresh() {
		t.Fatal("not fresh within the window")
	}
	now = now.Add(time.Second)
	if fresh() {
		t.Fatal("still fresh once the window ended")
	}
	c.searchAttributesChanged()
	now = now.Add(time.Minute)
	if !fresh() {
		t.Fatal("a change did not open the window again")
	}
	if freshFor <= 60*time.Second {
		t.Fatalf("window %s: the server's caches refresh every 60 s, so a cache read before a change may be that old", freshFor)
	}
	key := dynamicconfig.TimerProcessorMaxPollRPS.Key()
	if cvs := c.GetValue(key); len(cvs) != 1 || cvs[0].Value != DynamicConfig()[key] {
		t.Fatalf("a fixed setting reads %v", cvs)
	}
	// An explicit value wins over the window (a bench measuring what the refresh costs).
	fixed := DynamicConfig()
	fixed[forceRefreshKey] = false
	c = newLiveConfig(fixed, func() time.Time { return now })
	if fresh() {
		t.Fatal("an explicit false was overridden")
	}
}
