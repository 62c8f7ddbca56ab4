// Package ports picks TCP ports for servers that are told their port before they bind it: the
// embedded Temporal server's services and the local control plane.
//
// A port the kernel hands out for ":0" comes from its ephemeral range, which every outgoing
// connection draws from too: between the check and the bind, any connection of a busy process can
// take it. The Temporal server cannot recover from a port taken under it (it exits the process),
// so ports are picked below that range, where only an explicit bind competes, and never twice in
// one process.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the bottom of the range picked from; the top is just under the ephemeral range.
const lowest = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Pick returns a port free on host now, below the ephemeral range and not handed out before by
// this process. Without room below the range it falls back to a kernel-chosen one.
func Pick(host string) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if top := ephemeralLow(); top-lowest >= 1000 {
		for range 200 {
			p := lowest + rand.IntN(top-lowest)
			if handed[p] || !free(host, p) {
				continue
			}
			handed[p] = true
			return p, nil
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	p := l.Addr().(*net.TCPAddr).Port
	handed[p] = true
	return p, nil
}

func free(host string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default when unknown).
func ephemeralLow() int {
	return parseRangeLow(readFile("/proc/sys/net/ipv4/ip_local_port_range"))
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

func parseRangeLow(s string) int {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 32768
	}
	return n
}
