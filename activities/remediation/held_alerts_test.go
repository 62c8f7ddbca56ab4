package remediation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/decide"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/notify"
)

type alertBox struct {
	mu  sync.Mutex
	got []notify.AlertInput
}

func (b *alertBox) Alert(_ context.Context, in notify.AlertInput) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, in)
	return nil
}

func (b *alertBox) all() []notify.AlertInput {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]notify.AlertInput(nil), b.got...)
}

// A denied permit that carries the device's alert says Alerted, and the worker sends the alerts
// of the devices held together: one per channel, the most severe level, the first devices named.
// A granted permit leaves its alert to the workflow.
func TestHeldAlertsGoTogether(t *testing.T) {
	box := &alertBox{}
	b := &breakerAnswer{res: breaker.PermitResult{Reason: "circuit breaker open: cap"}}
	a := &Activities{Kube: fake.NewClientset(), Breaker: b, Alerter: box, BreakerConfig: breaker.DefaultConfig()}
	a.held.every = 20 * time.Millisecond
	for i := range 25 {
		al := notify.AlertInput{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Level: "critical", Text: "device reported Unhealthy"}
		if i == 24 {
			al.Channel, al.Level = "#other", "warning"
		}
		res, err := a.AcquirePermit(context.Background(), PermitInput{Device: al.Device, Action: decide.Quarantined, HeldAlert: &al})
		if err != nil || res.Granted || !res.Alerted {
			t.Fatalf("gpu-%d: %+v %v", i, res, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(box.all()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := box.all()
	if len(got) != 2 || got[0].Channel != "" || got[1].Channel != "#other" {
		t.Fatalf("summaries %+v", got)
	}
	if got[0].Level != "critical" || !strings.HasPrefix(got[0].Text, "24 devices held by the circuit breaker (circuit breaker open: cap)") ||
		!strings.Contains(got[0].Text, "d/p/gpu-19: device reported Unhealthy") || strings.Contains(got[0].Text, "gpu-20:") || !strings.Contains(got[0].Text, "and 4 more") {
		t.Fatalf("summary %q (%s)", got[0].Text, got[0].Level)
	}
	if got[1].Level != "warning" || !strings.Contains(got[1].Text, "1 devices held") {
		t.Fatalf("second channel %+v", got[1])
	}
	b.res = breaker.PermitResult{Granted: true}
	al := notify.AlertInput{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-x"}, Level: "critical", Text: "x"}
	if res, _ := a.AcquirePermit(context.Background(), PermitInput{Device: al.Device, Action: decide.Quarantined, HeldAlert: &al}); !res.Granted || res.Alerted {
		t.Fatalf("a granted permit took the alert: %+v", res)
	}
}

// Notes (warnings and notices) go together too, and a reason with a percent sign is kept whole.
func TestNotesGoTogether(t *testing.T) {
	box := &alertBox{}
	a := &Activities{Alerter: box}
	a.notes.every, a.held.every = 20*time.Millisecond, 20*time.Millisecond
	for i := range 3 {
		if err := a.NoteAlert(context.Background(), notify.AlertInput{Device: device.ID{Driver: "d", Pool: "p", Device: fmt.Sprint("gpu-", i)}, Level: "warning", Text: "device reported Unknown"}); err != nil {
			t.Fatal(err)
		}
	}
	(alertHolder{a}).holdAlert(notify.AlertInput{Device: device.ID{Driver: "d", Pool: "p", Device: "gpu-9"}, Level: "critical", Text: "x"}, "cap of 20 (10% of 200)")
	deadline := time.Now().Add(5 * time.Second)
	for len(box.all()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := box.all()
	if len(got) != 2 {
		t.Fatalf("summaries %+v", got)
	}
	var notes, held notify.AlertInput
	for _, g := range got {
		if strings.Contains(g.Text, "held") {
			held = g
		} else {
			notes = g
		}
	}
	if !strings.HasPrefix(notes.Text, "3 device alerts in the last seconds:") || notes.Level != "warning" || !strings.Contains(notes.Text, "d/p/gpu-2: device reported Unknown") {
		t.Fatalf("notes %+v", notes)
	}
	if !strings.Contains(held.Text, "(cap of 20 (10% of 200))") {
		t.Fatalf("held %q", held.Text)
	}
}
