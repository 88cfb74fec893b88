package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvBin names a directory holding initdb and postgres, to use before the
// usual places.
const EnvBin = "NODEMGR_TEST_POSTGRES_BIN"

// How long the server may take to start and to stop.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// superuser is the user initdb makes; the server trusts local connections.
const superuser = "nodemgr"

// missingError says that no PostgreSQL binaries were found.
type missingError struct {
	looked []string
	what   string // another program that is missing, when set
}

func (e *missingError) Error() string {
	if e.what != "" {
		return "no " + e.what
	}
	return fmt.Sprintf("no PostgreSQL server binaries (initdb and postgres) in %s or on PATH", strings.Join(e.looked, ", "))
}

// process is a PostgreSQL server that pgtest started.
type process struct {
	dir    string // data, socket and log, removed on stop
	cmd    *exec.Cmd
	exited chan struct{}
}

// startPostgres makes a cluster in a new temporary directory and starts a
// server on it that listens on a unix socket in that directory only.
func startPostgres() (*process, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	owner, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tempRoot(owner), "nodemgr-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("make the server's directory: %w", err)
	}
	p := &process{dir: dir, exited: make(chan struct{})}
	if err := p.start(bin, owner); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *process) start(bin string, owner *account) error {
	if owner != nil {
		if err := os.Chown(p.dir, owner.uid, owner.gid); err != nil {
			return fmt.Errorf("give %s to the server's user: %w", p.dir, err)
		}
	}
	data := filepath.Join(p.dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", superuser,
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = sysProcAttr(owner, false)
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %v\n%s", data, err, out)
	}
	log, err := os.Create(filepath.Join(p.dir, "postgres.log"))
	if err != nil {
		return fmt.Errorf("make the server's log: %w", err)
	}
	defer log.Close()
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", p.dir, "-p", "5432",
		"-c", "listen_addresses=", // the unix socket only: no TCP port at all
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = sysProcAttr(owner, true)
	if err := p.run(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	if err := p.waitReady(); err != nil {
		p.stop()
		return err
	}
	return nil
}

// run starts the server from a goroutine that holds its OS thread until
// the server exits: the kernel signals a child whose parent *thread* ends
// (see sysProcAttr), and Go may end an idle thread that nothing holds.
func (p *process) run() error {
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := p.cmd.Start()
		started <- err
		if err == nil {
			p.cmd.Wait()
		}
		close(p.exited)
	}()
	return <-started
}

// waitReady waits until the server takes connections.
func (p *process) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, p.url())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("postgres exited at start: %s", p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not take connections within %s (%v): %s", startTimeout, err, p.logTail())
		}
	}
}

// url is the admin URL of the server: the superuser, the socket directory.
func (p *process) url() string {
	u := url.URL{Scheme: "postgres", User: url.User(superuser), Path: "/postgres",
		RawQuery: url.Values{"host": {p.dir}, "sslmode": {"disable"}}.Encode()}
	return u.String()
}

// stop shuts the server down (fast: it ends sessions) and removes its
// directory.
func (p *process) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(stopTimeout):
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	os.RemoveAll(p.dir)
}

func (p *process) logTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// findBinaries finds a directory with initdb and postgres: EnvBin, the
// Debian places (version 15 first, then the newest), then PATH.
func findBinaries() (string, error) {
	var dirs []string
	if d := os.Getenv(EnvBin); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "/usr/lib/postgresql/15/bin")
	others, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Reverse(others) // newest first, for versions of two digits
	dirs = append(dirs, others...)
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", &missingError{looked: slices.Compact(dirs)}
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// account is the user the server runs as when the tests run as root.
type account struct{ uid, gid int }

// tempRoot is where the server's directory goes: as root, /tmp, which the
// server's user can reach whatever TMPDIR says.
func tempRoot(owner *account) string {
	if owner != nil {
		return "/tmp"
	}
	return os.TempDir()
}

// errNoUser is returned when running as root without a user to run as.
var errNoUser = errors.New("the tests run as root, PostgreSQL refuses to, and there is no user nobody to run it as")
