package rolloutplan

import (
	"strings"
	"testing"
)

func TestCheckCommand(t *testing.T) {
	me := Command{Actor: "sre"}
	run := Standing{State: StateRunning, Enabled: 1}
	cases := []struct {
		name string
		cmd  string
		c    Command
		s    Standing
		want string // "" = accepted
	}{
		{"no actor", CmdPause, Command{}, run, "actor is required"},
		{"pause running", CmdPause, me, run, ""},
		{"pause twice", CmdPause, me, Standing{State: StateRunning, Paused: true}, "already paused"},
		{"pause completed", CmdPause, me, Standing{State: StateCompleted}, "nothing to pause"},
		{"pause rolled back", CmdPause, me, Standing{State: StateRolledBack}, "nothing to pause"},
		{"pause waiting approval", CmdPause, me, Standing{State: StateWaitingApproval}, ""},
		{"resume running", CmdResume, me, run, "not paused, blocked or rolled back"},
		{"resume paused", CmdResume, me, Standing{State: StateRunning, Paused: true}, ""},
		{"resume blocked", CmdResume, me, Standing{State: StateBlocked}, ""},
		{"resume rolled back", CmdResume, me, Standing{State: StateRolledBack}, ""},
		{"rollback nothing", CmdRollback, me, Standing{State: StateBlocked}, "nothing to roll back"},
		{"rollback enabled", CmdRollback, me, run, ""},
		{"rollback twice", CmdRollback, me, Standing{State: StateRunning, Enabled: 1, RollbackPending: true}, "already under way"},
		{"rollback while a failed gate rolls back", CmdRollback, me, Standing{State: StateBlocking, Enabled: 2}, "send the rollback again"},
		{"rollback blocked with phases enabled", CmdRollback, me, Standing{State: StateBlocked, Enabled: 1}, ""},
		{"approve none", CmdApprove, Command{Actor: "sre", Phase: "a"}, run, "no phase waits"},
		{"approve other", CmdApprove, Command{Actor: "sre", Phase: "b"}, Standing{State: StateWaitingApproval, Awaiting: "a"}, "\"a\" does"},
		{"approve", CmdApprove, Command{Actor: "sre", Phase: "a"}, Standing{State: StateWaitingApproval, Awaiting: "a"}, ""},
		{"unknown", "promote", me, run, "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckCommand(c.cmd, c.c, c.s)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error = %v, want %q", err, c.want)
			}
		})
	}
}
