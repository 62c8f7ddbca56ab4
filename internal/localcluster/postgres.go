package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/devicewarden/devicewarden/internal/ports"
)

// Postgres is a PostgreSQL server of the distribution's packages (`apt-get install postgresql`),
// run for a test or a benchmark in a directory of its own, on a free port, with user postgres and
// no password, and without fsync: its data lives as long as the run.
type Postgres struct {
	Port int
	dir  string
	cmd  *exec.Cmd
	log  *os.File
}

// ErrNoPostgres says the distribution's PostgreSQL is not installed.
var ErrNoPostgres = errors.New("PostgreSQL is not installed (as root: apt-get install postgresql)")

// postgresBin is the bin directory of the newest PostgreSQL installed.
func postgresBin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(found) == 0 {
		return "", ErrNoPostgres
	}
	slices.SortFunc(found, func(a, b string) int { return majorOf(a) - majorOf(b) })
	return filepath.Dir(found[len(found)-1]), nil
}

func majorOf(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// StartPostgres initialises a database cluster in a new directory and starts its server. PostgreSQL
// refuses to run as root: as root, the cluster belongs to the packages' postgres user.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "devicewarden-postgres-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{dir: dir}
	cred, err := p.owner()
	if err != nil {
		p.Stop()
		return nil, err
	}
	run := func(name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 20))
	}
	if p.Port, err = ports.Pick("127.0.0.1"); err != nil {
		p.Stop()
		return nil, err
	}
	if p.log, err = os.Create(filepath.Join(dir, "postgres.log")); err != nil {
		p.Stop()
		return nil, err
	}
	p.cmd = run("postgres", "-D", data, "-p", strconv.Itoa(p.Port), "-h", "127.0.0.1", "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=300")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if run("pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port)).Run() == nil {
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			data, _ := os.ReadFile(p.log.Name())
			p.Stop()
			return nil, fmt.Errorf("postgres not ready within a minute: %s", lastLines(string(data), 20))
		}
	}
}

// owner makes the directory the postgres user's when this is root, and returns the credential to
// run PostgreSQL with (nil: as this user).
func (p *Postgres) owner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root, and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(p.dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Addr is the server's address.
func (p *Postgres) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port) }

// Pid is the postmaster's process ID (0 when stopped); it leads a process group of its own, its
// backends included.
func (p *Postgres) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Stop stops the server and deletes its data.
func (p *Postgres) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	if p.log != nil {
		p.log.Close()
	}
	_ = os.RemoveAll(p.dir)
}
