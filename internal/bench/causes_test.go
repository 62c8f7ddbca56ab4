package bench

import (
	"strings"
	"testing"
)

// A mix is read as class=weight; a class it does not know, a weight that is no number or
// negative, or a mix that weighs nothing is refused.
func TestParseMix(t *testing.T) {
	m, err := ParseMix("application=40, reset=35,node=15,replace=10")
	if err != nil || m["application"] != 40 || m["reset"] != 35 || m["node"] != 15 || m["replace"] != 10 {
		t.Fatalf("%v %v", m, err)
	}
	for in, want := range map[string]string{
		"reboot=10":             `unknown class "reboot"`,
		"reset=ten":             "want class=weight",
		"reset=-1":              "want class=weight",
		"reset":                 "want class=weight",
		"reset=0,application=0": "weighs nothing",
	} {
		if _, err := ParseMix(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// The draw follows the weights: a class of weight 0 is never drawn, and the same seed draws the
// same faults.
func TestDrawMix(t *testing.T) {
	o := CausesOptions{Mix: map[string]int{"application": 1, "reset": 3}, Seed: 7}
	a, b := drawMix(o, 400), drawMix(o, 400)
	n := map[string]int{}
	for i := range a {
		if a[i].class != b[i].class {
			t.Fatal("the same seed drew other faults")
		}
		n[a[i].class]++
	}
	if n["node"]+n["replace"] != 0 || n["reset"] < 2*n["application"] {
		t.Fatalf("drawn %v from weights %v", n, o.Mix)
	}
}
