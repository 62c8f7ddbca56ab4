package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// cpuMeter reads the CPU the bench process (embedded Temporal, worker, watcher) and the control
// plane's processes spend over an interval, and profiles the bench process to split its share.
type cpuMeter struct {
	pids    map[string]int
	start   map[string]time.Duration
	profile bytes.Buffer
	self    time.Duration
}

func startCPU(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]time.Duration{}, self: selfCPU()}
	for name, pid := range pids {
		m.start[name] = procCPU(pid)
	}
	if err := pprof.StartCPUProfile(&m.profile); err != nil {
		m.profile.Reset() // another profile runs: no split
	}
	return m
}

// cpuSpent is what each part spent.
type cpuSpent struct {
	// holds says what runs in the bench process.
	holds string
	self  time.Duration
	procs map[string]time.Duration
	// parts splits self by who ran: Temporal server, SDK (worker and clients), watcher, ...
	parts map[string]time.Duration
}

func (m *cpuMeter) stop() cpuSpent {
	pprof.StopCPUProfile()
	if path := os.Getenv("DEVICEWARDEN_BENCH_CPUPROFILE"); path != "" {
		// The whole profile, for go tool pprof: the split below only names owners.
		if err := os.WriteFile(path, m.profile.Bytes(), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "[bench] CPU profile not written: %v\n", err)
		}
	}
	s := cpuSpent{self: selfCPU() - m.self, procs: map[string]time.Duration{}}
	for name, pid := range m.pids {
		s.procs[name] = procCPU(pid) - m.start[name]
	}
	if p, err := profile.Parse(&m.profile); err == nil {
		s.parts = splitProfile(p)
	}
	return s
}

// owners attribute a profile sample to the first of these found anywhere on its stack.
var owners = []struct{ name, prefix string }{
	{"temporal-server", "go.temporal.io/server/"},
	{"watcher", "github.com/devicewarden/devicewarden/internal/watcher"},
	{"temporal-sdk(worker+clients)", "go.temporal.io/sdk/"},
	{"devicewarden(activities,bench)", "github.com/devicewarden/devicewarden/"},
	{"client-go", "k8s.io/client-go/"},
	{"sqlite", "modernc.org/sqlite"},
	{"grpc", "google.golang.org/grpc"},
	{"gc", "runtime.gcBgMarkWorker"},
}

func splitProfile(p *profile.Profile) map[string]time.Duration {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil
	}
	out := map[string]time.Duration{}
	for _, smp := range p.Sample {
		owner := "other(runtime,net)"
	find:
		for _, o := range owners {
			for _, loc := range smp.Location {
				for _, ln := range loc.Line {
					if ln.Function != nil && strings.HasPrefix(ln.Function.Name, o.prefix) {
						owner = o.name
						break find
					}
				}
			}
		}
		out[owner] += time.Duration(smp.Value[idx])
	}
	return out
}

func (s cpuSpent) print(out io.Writer, what any, over time.Duration) {
	cp := 0.0
	var names []string
	for n, d := range s.procs {
		names = append(names, n)
		if n == "etcd" || n == "kube-apiserver" {
			cp += d.Seconds()
		}
	}
	sort.Strings(names)
	var procs []string
	for _, n := range names {
		procs = append(procs, fmt.Sprintf("%s %.1f", n, s.procs[n].Seconds()))
	}
	fmt.Fprintf(out, "%s storm CPU-s over %.1fs: devicewarden process (%s) %.1f; apiserver+etcd %.1f; %s\n",
		what, over.Seconds(), s.holds, s.self.Seconds(), cp, strings.Join(procs, ", "))
	if by := s.byOwner(); by != "" {
		fmt.Fprintf(out, "%s storm: devicewarden process CPU profile by owner, CPU-s: %s\n", what, by)
	}
}

// byOwner is the profile's split of the bench process's CPU, the largest first ("" without a
// profile).
func (s cpuSpent) byOwner() string {
	type part struct {
		name string
		d    time.Duration
	}
	var parts []part
	var total time.Duration
	for n, d := range s.parts {
		parts = append(parts, part{n, d})
		total += d
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].d > parts[j].d })
	var fields []string
	for _, p := range parts {
		fields = append(fields, fmt.Sprintf("%s %.2f (%.0f%%)", p.name, p.d.Seconds(), 100*p.d.Seconds()/total.Seconds()))
	}
	return strings.Join(fields, ", ")
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads a process's user+system time from /proc (clock ticks of 1/100 s), with that of
// its children, living or ended and waited for (PostgreSQL's backends are the postmaster's
// children, each in a session of its own).
func procCPU(pid int) time.Duration {
	f := statFields(strconv.Itoa(pid))
	if len(f) < 15 {
		return 0
	}
	ticks := field(f, 11) + field(f, 12) + field(f, 13) + field(f, 14)
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name() == strconv.Itoa(pid) || p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		if m := statFields(p.Name()); len(m) >= 13 && field(m, 1) == int64(pid) {
			ticks += field(m, 11) + field(m, 12)
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// statFields are the fields of /proc/<pid>/stat after the command name, which is in parentheses
// and may hold spaces: state, ppid, pgrp, ... utime (11), stime, cutime, cstime.
func statFields(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil
	}
	return strings.Fields(string(b[i+2:]))
}

func field(f []string, i int) int64 {
	n, _ := strconv.ParseInt(f[i], 10, 64)
	return n
}
