package ssh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

const (
	// outputWait bounds how long Exec waits for output after the command
	// has exited: only a process it left behind can still hold it open.
	outputWait = 2 * time.Second
	// markerWait bounds how long a cut-off command's PID is waited for.
	markerWait = 2 * time.Second
	// markerPrefix starts the line the wrapper writes on stdout before
	// the command runs: "nodemgr-exec:PID:STATUS".
	markerPrefix = "nodemgr-exec:"
)

// Exec runs cmd on d and returns its exit code (128+n for a command
// killed by signal n). An error means it could not be run, or was cut
// off by ctx or cmd.Timeout; the exit code is then -1.
func (e *SSH) Exec(ctx context.Context, d provision.Deployment, cmd execute.Command) (int, error) {
	if err := execute.Check(e, d); err != nil {
		return -1, err
	}
	return e.Run(ctx, d, cmd)
}

// Run is Exec without the capability check, for the executors that reach
// machines through this one (sftp, rsync) once they have checked their
// own capability.
func (e *SSH) Run(ctx context.Context, d provision.Deployment, cmd execute.Command) (int, error) {
	ctx, cancel, err := cmd.Bound(ctx)
	if err != nil {
		return -1, err
	}
	defer cancel()
	line, err := commandLine(cmd.Argv, cmd.Env, cmd.Dir)
	if err != nil {
		return -1, err
	}
	t, err := e.Target(d)
	if err != nil {
		return -1, err
	}
	code, err := e.run(ctx, t, line, cmd)
	if err != nil {
		return -1, fmt.Errorf("exec %s on %s: %w", cmd.Argv[0], d.Name, cmd.CutOff(ctx, err))
	}
	return code, nil
}

// commandLine is what the executor asks sshd to run for argv with env
// (KEY=VALUE) added, in dir: a line for the login shell that has /bin/sh
// run the wrapper, which writes its marker and then execs argv.
func commandLine(argv, env []string, dir string) (string, error) {
	if len(argv) == 0 {
		return "", errdefs.Field("argv", "is empty")
	}
	prog := argv[0]
	if prog == "" {
		return "", errdefs.Field("argv[0]", "is empty; name the program to run")
	}
	path, hasPath := "", false
	for i, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return "", errdefs.Field(fmt.Sprintf("env[%d]", i), "%q is not KEY=VALUE", kv)
		}
		if k == "PATH" {
			path, hasPath = v, true
		}
	}
	if len(env) > 0 && strings.Contains(prog, "=") {
		// env would take it for a variable.
		return "", errdefs.Field("argv[0]", "%q has an = in it, which cannot be run with env set over ssh", prog)
	}
	var b strings.Builder
	status := func(s string) string { return `{ echo "` + markerPrefix + `$$:` + s + `"; exit 0; }` }
	if dir != "" {
		q := Quote(dir)
		fmt.Fprintf(&b, "cd -- %s 2>/dev/null || if [ -e %s ]; then %s; else %s; fi\n", q, q, status("notdir"), status("nodir"))
	}
	switch {
	case strings.Contains(prog, "/"):
		fmt.Fprintf(&b, "[ -e %s ] || %s\n", Quote(prog), status("noprog"))
	case hasPath:
		fmt.Fprintf(&b, "(PATH=%s; command -v -- %s) >/dev/null 2>&1 || %s\n", Quote(path), Quote(prog), status("noprog"))
	default:
		fmt.Fprintf(&b, "command -v -- %s >/dev/null 2>&1 || %s\n", Quote(prog), status("noprog"))
	}
	b.WriteString(`echo "` + markerPrefix + `$$:run"` + "\n")
	b.WriteString("exec ")
	if len(env) > 0 || strings.HasPrefix(prog, "-") {
		b.WriteString("env -- ")
		for _, kv := range env {
			b.WriteString(Quote(kv) + " ")
		}
	}
	b.WriteString(Join(argv))
	return "exec /bin/sh -c " + Quote(b.String()), nil
}

// exitStatus is how a remote command ended.
type exitStatus struct {
	code int
	ok   bool // false: the channel closed with no exit status
}

// run runs line on t with cmd's streams and returns the command's exit
// code.
func (e *SSH) run(ctx context.Context, t Target, line string, cmd execute.Command) (int, error) {
	ch, reqs, release, err := e.channel(ctx, t)
	if err != nil {
		return -1, err
	}
	defer release()
	defer ch.Close()

	exited := make(chan exitStatus, 1)
	go func() {
		st, sent := exitStatus{}, false
		for req := range reqs {
			switch req.Type {
			case "exit-status":
				var m struct{ Status uint32 }
				if ssh.Unmarshal(req.Payload, &m) == nil {
					st = exitStatus{code: int(m.Status), ok: true}
				}
			case "exit-signal":
				var m struct {
					Signal     string
					CoreDumped bool
					Error      string
					Lang       string
				}
				if ssh.Unmarshal(req.Payload, &m) == nil {
					st = exitStatus{code: 128 + signalNumber(m.Signal), ok: true}
				}
			}
			if req.WantReply {
				req.Reply(false, nil)
			}
			if st.ok && !sent {
				exited <- st
				sent = true
			}
		}
		if !sent {
			exited <- st
		}
	}()

	ok, err := sendExec(ctx, ch, line)
	if err != nil {
		return -1, err
	}
	if !ok {
		return -1, errdefs.Class(fmt.Errorf("%s refused to run a command", t.Addr()), errdefs.ErrUnavailable)
	}

	if cmd.Stdin != nil {
		go func() {
			// The command may exit without reading it all; the
			// copy then ends at the next write.
			io.Copy(ch, cmd.Stdin)
			ch.CloseWrite()
		}()
	} else {
		ch.CloseWrite()
	}
	// Nothing is written to the caller's streams once run returns.
	stdout, stderr := newGate(orDiscard(cmd.Stdout)), newGate(orDiscard(cmd.Stderr))
	defer stdout.shut()
	defer stderr.shut()
	m := &marker{w: stdout, started: make(chan startInfo, 1)}
	var tail tailBuffer
	outDone := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Go(func() { io.Copy(m, ch) })
		wg.Go(func() { io.Copy(io.MultiWriter(stderr, &tail), ch.Stderr()) })
		wg.Wait()
		close(outDone)
	}()

	var start startInfo
	started := m.started
	var st exitStatus
wait:
	for {
		select {
		case start = <-started:
			started = nil
		case st = <-exited:
			break wait
		case <-ctx.Done():
			if started != nil {
				// The PID may be on its way.
				select {
				case start = <-started:
				case <-time.After(markerWait):
				}
			}
			ch.Close()
			if start.pid > 0 {
				e.kill(t, start.pid)
			}
			return -1, ctx.Err()
		}
	}
	// Output written before the exit may still be on its way.
	timer := time.NewTimer(outputWait)
	select {
	case <-outDone:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	if started != nil {
		select {
		case start = <-started:
		default:
		}
	}
	switch {
	case start.status == "" && !st.ok:
		return -1, errdefs.Class(fmt.Errorf("the connection to %s ended before the command did", t.Addr()), errdefs.ErrUnavailable)
	case start.status == "":
		why := strings.TrimSpace(tail.String())
		return -1, fmt.Errorf("the login shell of %s on %s did not start the command (exit %d): %s: %w", t.User, t.Addr(), st.code, why, errdefs.ErrInvalid)
	case start.status == "nodir":
		return -1, errdefs.Class(errdefs.Field("workdir", "%s does not exist on the machine; create it first or choose another", cmd.Dir), errdefs.ErrNotFound)
	case start.status == "notdir":
		return -1, errdefs.Field("workdir", "%s is not a directory this user can enter", cmd.Dir)
	case start.status == "noprog":
		return -1, errdefs.NotFound("program %s on the machine's PATH", cmd.Argv[0])
	case !st.ok:
		return -1, errdefs.Class(fmt.Errorf("the connection to %s ended before the command did", t.Addr()), errdefs.ErrUnavailable)
	}
	return st.code, nil
}

// sendExec asks for line to be run on ch and returns the server's answer.
func sendExec(ctx context.Context, ch ssh.Channel, line string) (bool, error) {
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := ch.SendRequest("exec", true, ssh.Marshal(struct{ Command string }{line}))
		done <- result{ok, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return false, errdefs.Class(r.err, errdefs.ErrUnavailable)
		}
		return r.ok, nil
	case <-ctx.Done():
		ch.Close()
		return false, ctx.Err()
	}
}

// killScript ends the process group (or, failing that, the process) PID:
// SIGTERM, then SIGKILL to what is left after 2 seconds.
const killScript = `kill -TERM -PID 2>/dev/null || kill -TERM PID 2>/dev/null || exit 0
i=0
while kill -0 -PID 2>/dev/null || kill -0 PID 2>/dev/null; do
	i=$((i+1)); [ $i -gt 20 ] && break
	sleep 0.1 2>/dev/null || sleep 1
done
kill -KILL -PID 2>/dev/null; kill -KILL PID 2>/dev/null; exit 0`

// kill ends a cut-off command and what it started, from a channel of its
// own. It is best effort: the connection may be what failed.
func (e *SSH) kill(t Target, pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, reqs, release, err := e.channel(ctx, t)
	if err != nil {
		return
	}
	defer release()
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	if ok, err := sendExec(ctx, ch, strings.ReplaceAll(killScript, "PID", strconv.Itoa(pid))); err != nil || !ok {
		return
	}
	ch.CloseWrite()
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, ch)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// startInfo is what the wrapper's marker says.
type startInfo struct {
	pid    int
	status string // run, nodir, notdir, noprog
}

// marker passes a command's stdout on, less the wrapper's marker line,
// which it reports on started. Lines before it (a login script's) pass
// too.
type marker struct {
	w       io.Writer
	started chan startInfo
	buf     []byte
	done    bool
}

func (m *marker) Write(p []byte) (int, error) {
	if m.done {
		return m.w.Write(p)
	}
	m.buf = append(m.buf, p...)
	for {
		i := bytes.IndexByte(m.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		if s, ok := parseMarker(string(m.buf[:i])); ok {
			m.done = true
			m.started <- s
			rest := m.buf[i+1:]
			m.buf = nil
			if len(rest) > 0 {
				if _, err := m.w.Write(rest); err != nil {
					return 0, err
				}
			}
			return len(p), nil
		}
		if _, err := m.w.Write(m.buf[:i+1]); err != nil {
			return 0, err
		}
		m.buf = m.buf[i+1:]
	}
}

func parseMarker(line string) (startInfo, bool) {
	rest, ok := strings.CutPrefix(line, markerPrefix)
	if !ok {
		return startInfo{}, false
	}
	p, s, ok := strings.Cut(rest, ":")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 {
		return startInfo{}, false
	}
	return startInfo{pid: pid, status: s}, true
}

// signalNumber maps a signal name as SSH sends it (TERM) to its number
// on Linux; the POSIX ones are the same everywhere.
func signalNumber(name string) int {
	if n, ok := signals[strings.TrimPrefix(name, "SIG")]; ok {
		return n
	}
	return 0
}

var signals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
	"STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
	"URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
	"PWR": 30, "SYS": 31,
}

// gate passes writes on until it is shut.
type gate struct {
	w      io.Writer
	sem    chan struct{} // held while writing
	closed atomic.Bool
}

func newGate(w io.Writer) *gate { return &gate{w: w, sem: make(chan struct{}, 1)} }

func (g *gate) Write(p []byte) (int, error) {
	g.sem <- struct{}{}
	defer func() { <-g.sem }()
	if g.closed.Load() {
		return 0, io.ErrClosedPipe
	}
	return g.w.Write(p)
}

// shut stops writes, waiting for one under way, unless the writer is
// stuck: that one is abandoned.
func (g *gate) shut() {
	g.closed.Store(true)
	select {
	case g.sem <- struct{}{}:
	case <-time.After(outputWait):
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

const tailSize = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, nil))
}
