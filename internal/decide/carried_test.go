package decide

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/policy"
)

// A state carried from a run whose code had no sourceWait names none in its policy. Decoded as
// it is, that reads 0, "do not wait": a review whose source is a moment late would fail at once.
// Under CarriedDefaults it waits the default; a policy that says 0 keeps 0.
func TestACarriedPolicyWithoutSourceWaitWaitsTheDefault(t *testing.T) {
	id := device.ID{Driver: "d", Pool: "p", Device: "gpu-0"}
	p := policy.Default()
	p.SourceWait = 0
	raw, err := json.Marshal(NewState(id, "node-1", p, false))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"sourceWait":"0s"`) {
		t.Fatalf("an explicit 0 is not written: %s", raw)
	}
	old := strings.Replace(string(raw), `"sourceWait":"0s",`, "", 1)
	for _, tc := range []struct {
		name    string
		carried string
		rules   Rules
		want    time.Duration
	}{
		{"before the field, new rules", old, Rules{SourceProof: true, CarriedDefaults: true}, policy.DefaultSourceWait},
		{"before the field, old rules", old, Rules{SourceProof: true}, 0},
		{"an explicit 0", string(raw), Rules{SourceProof: true, CarriedDefaults: true}, 0},
	} {
		st, err := Start(Input{Carried: json.RawMessage(tc.carried), Device: id}, tc.rules)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Policy.SourceWait.D(); got != tc.want {
			t.Errorf("%s: sourceWait %s, want %s", tc.name, got, tc.want)
		}
	}
	if strings.Contains(old, "sourceWait") {
		t.Fatal("the old state still names sourceWait")
	}
}
