package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRepairLadder(t *testing.T) {
	set, err := Parse([]byte(`
default: {}
drivers:
  gpu.example.com: {identity: [uuid]}
policies:
  - name: gpus
    match: {driver: gpu.example.com}
    repair:
      retireAfter: 3
      steps:
        - kind: reset
          attempts: 2
          image: registry.example.com/gpu-reset:1
          command: [gpu-reset, --device]
          timeout: 2m
`))
	if err != nil {
		t.Fatal(err)
	}
	if set.For("", "other.example.com").Repair.Enabled() || Default().Repair.Enabled() {
		t.Fatal("a policy without a ladder repairs")
	}
	r := set.For("", "gpu.example.com").Repair
	if !r.Enabled() || r.RetireAfter != 3 || len(r.Steps) != 1 {
		t.Fatalf("ladder %+v", r)
	}
	s := r.Steps[0]
	if s.Kind != RepairReset || s.Attempts != 2 || s.Check.Image != "registry.example.com/gpu-reset:1" ||
		!slices.Equal(s.Check.Command, []string{"gpu-reset", "--device"}) || s.Check.Timeout.D() != 2*time.Minute || s.Check.Namespace != DefaultResetNamespace {
		t.Fatalf("step %+v", s)
	}
}

// A broken ladder is refused with the line and the reason, and loads nothing.
func TestBadRepairLadders(t *testing.T) {
	for _, tt := range []struct{ ladder, want string }{
		{`steps: [{kind: reboot-everything, image: i, command: [c]}]`, `unknown kind "reboot-everything"`},
		{`steps: [{kind: reset, attempts: 0, image: i, command: [c]}]`, "attempts must be >= 1"},
		{`steps: [{kind: reset, command: [c]}]`, "needs an image and a command"},
		{`steps: [{kind: reset, image: i}]`, "needs an image and a command"},
		{`steps: [{kind: reset, image: i, command: [c], timeout: 0s}]`, "timeout must be positive"},
		{`retireAfter: -1`, "retireAfter must be >= 0"},
		{`steps: [{kind: reset, image: i, command: [c], colour: red}]`, "colour"},
	} {
		set, err := Parse([]byte("default:\n  repair: {" + tt.ladder + "}\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, %v; want an error with %q", tt.ladder, set, err, tt.want)
		}
	}
}
