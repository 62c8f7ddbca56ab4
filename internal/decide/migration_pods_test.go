package decide

import (
	"testing"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

func TestMigrationPods(t *testing.T) {
	p := policy.Default()
	p.Migration = policy.DefaultMigration()
	p.Migration.Enabled = true
	st := NewState(dev, "node-1", p, false)
	o := obs(device.Unhealthy, 1, "")
	o.Reporters = append(o.Reporters, Reporter{Namespace: "ns", Pod: "p", Container: "c2"}, Reporter{Namespace: "ns", Pod: "q"},
		Reporter{Slice: "slice-1"})
	st.Observe(o, t0)
	q := Action{Kind: ActTaint, To: Quarantined}
	if got := fenceOf(st).migrationPods(q); len(got) != 2 || got[0] != (PodRef{"ns", "p"}) || got[1] != (PodRef{"ns", "q"}) {
		t.Fatalf("pods %v, want ns/p and ns/q once each", got)
	}
	if got := fenceOf(st).migrationPods(Action{Kind: ActTaint, To: Restricted}); got != nil {
		t.Fatalf("a restriction moves %v", got)
	}
	unknown := NewState(dev, "node-1", p, false)
	unknown.Observe(obs(device.Unknown, 1, ""), t0)
	if got := fenceOf(unknown).migrationPods(q); got != nil {
		t.Fatalf("an Unknown device moves %v", got)
	}
	off := NewState(dev, "node-1", policy.Default(), false)
	off.Observe(obs(device.Unhealthy, 1, ""), t0)
	if got := fenceOf(off).migrationPods(q); got != nil {
		t.Fatalf("migration off, yet %v", got)
	}
}
