package kubeobj

import (
	"regexp"
	"strings"
	"testing"
)

// labelRE is the API's label value syntax.
var labelRE = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

func TestLabelValueIsAlwaysValid(t *testing.T) {
	tests := map[string]string{
		"gpu-0":                               "gpu-0",
		"rack-1/node-7":                       "rack-1-node-7",
		"a/" + strings.Repeat("b", 60) + "-c": "a-" + strings.Repeat("b", 60),
		strings.Repeat("x", 62) + ".y":        strings.Repeat("x", 62),
		"-leading.and.trailing-":              "leading.and.trailing",
		"":                                    "",
		"///":                                 "",
		"Ünïcode":                             "n--code",
		"azAZ09-_.":                           "azAZ09",
		"zaZA90":                              "zaZA90",
		"9.Z_a-z.A_0":                         "9.Z_a-z.A_0",
		"@[`{/:":                              "",
		"aZ":                                  "aZ",
		"a0":                                  "a0",
		"Aa":                                  "Aa",
		"0a":                                  "0a",
	}
	for in, want := range tests {
		got := LabelValue(in)
		if got != want || len(got) > 63 || !labelRE.MatchString(got) {
			t.Errorf("LabelValue(%q) = %q, want %q (valid)", in, got, want)
		}
	}
}

// A configured namespace is kept; none means DeviceWarden's default one.
func TestOwn(t *testing.T) {
	if got := Own("devicewarden-system"); got != "devicewarden-system" {
		t.Fatalf("configured: %q", got)
	}
	if got := Own(""); got != "default" {
		t.Fatalf("none configured: %q", got)
	}
}
