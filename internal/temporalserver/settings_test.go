package temporalserver

import (
	"strings"
	"testing"

	"go.temporal.io/server/common/dynamicconfig"
)

func TestParseSetting(t *testing.T) {
	for _, tc := range []struct {
		in   string
		key  string
		want any
	}{
		{"history.eventsCacheMaxSizeBytes=8388608", "history.eventsCacheMaxSizeBytes", 8388608},
		{"history.cacheSizeBasedLimit=true", "history.cacheSizeBasedLimit", true},
		{" history.cacheTTL = 10m", "history.cacheTTL", "10m"},
	} {
		key, v, err := ParseSetting(tc.in)
		if err != nil || key != tc.key || v != tc.want {
			t.Errorf("ParseSetting(%q) = %q, %#v, %v; want %q, %#v", tc.in, key, v, err, tc.key, tc.want)
		}
	}
	for _, bad := range []struct{ in, says string }{
		{"history.eventsCacheMaxSizeBytes", "want key=value"},
		{"=5", "want key=value"},
		{"history.cacheTTL=", "want key=value"},
		{"history.noSuchSetting=5", "unregistered key"},
		{"history.cacheSizeBasedLimit=maybe", "validation failed"},
		{"history.cacheTTL=[1, 2", "decode"},
		{"history.cacheTTL=1\nhistory.x: 2", "one line"},
	} {
		if _, _, err := ParseSetting(bad.in); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("ParseSetting(%q) = %v; want an error saying %q", bad.in, err, bad.says)
		}
	}
}

// The overrides reach the server's settings over the built-in tuning.
func TestConfigSettingsOverrideTheTuning(t *testing.T) {
	cfg := Config{Settings: map[string]any{"history.timerProcessorMaxPollRPS": 20, "history.cacheTTL": "10m"}}
	dc := cfg.dynamicConfig()
	timer := dynamicconfig.TimerProcessorMaxPollRPS.Key()
	if dc[timer] != 20 || dc[dynamicconfig.HistoryCacheTTL.Key()] != "10m" {
		t.Fatalf("settings not applied: %v", dc)
	}
	if DynamicConfig()[timer] == 20 {
		t.Fatal("an override changed the built-in tuning")
	}
}
