package ports

import (
	"net"
	"strconv"
	"testing"
)

// Picked ports are bindable, below the ephemeral range, and never handed out twice.
func TestPick(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p, err := Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if low-lowest >= 1000 && (p < lowest || p >= low) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("picked port %d does not bind: %v", p, err)
		}
		l.Close()
	}
}

// A port in use is not free; once closed it is.
func TestFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	if free("127.0.0.1", p) {
		t.Fatalf("port %d in use counted free", p)
	}
	l.Close()
	if !free("127.0.0.1", p) {
		t.Fatalf("port %d closed counted in use", p)
	}
}

func TestParseRangeLow(t *testing.T) {
	for in, want := range map[string]int{"32768\t60999\n": 32768, "1024 65000": 1024, "": 32768, "x y": 32768, "5": 32768} {
		if got := parseRangeLow(in); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}
