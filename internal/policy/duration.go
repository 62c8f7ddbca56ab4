package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// JSONDuration is a time.Duration written as "48h" or "90s" in payloads, queries and histories, so a
// person typing a Temporal CLI command never counts nanoseconds. It still reads a bare number of
// nanoseconds, which is how histories recorded before it wrote durations.
type JSONDuration time.Duration

// MarshalJSON writes the Go duration string.
func (d JSONDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads "48h" (or a legacy integer of nanoseconds); anything else is an error.
func (d *JSONDuration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*d = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s == "" {
			*d = 0
			return nil
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: want e.g. 90s, 30m, 48h", s)
		}
		*d = JSONDuration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"48h\"", b)
	}
	*d = JSONDuration(n)
	return nil
}

// D is the value as a time.Duration.
func (d JSONDuration) D() time.Duration { return time.Duration(d) }

// String is the Go duration string.
func (d JSONDuration) String() string { return time.Duration(d).String() }
