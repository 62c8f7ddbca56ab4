package cli

import (
	"strings"
	"testing"
)

// The stand-ins the lean build carries: one for each one-machine command of the full build, each
// refusing any arguments with the command's name and the build that has it.
func TestStandInsNameTheFullBuild(t *testing.T) {
	full := map[string]bool{}
	for _, c := range localCommands(&globals{}) {
		full[c.Name()] = true
	}
	stand := standIns()
	if len(stand) != len(full) {
		t.Fatalf("%d stand-ins for %d one-machine commands", len(stand), len(full))
	}
	for _, c := range stand {
		if !full[c.Name()] {
			t.Errorf("stand-in %q is none of the one-machine commands", c.Name())
		}
		err := c.RunE(c, []string{"--any", "args"})
		if err == nil || !strings.Contains(err.Error(), "devicewarden "+c.Name()+" is not in this build") || !strings.Contains(err.Error(), "the full build (make build,") {
			t.Errorf("%s: %v", c.Name(), err)
		}
	}
}
