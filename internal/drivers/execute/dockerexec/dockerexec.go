// Package dockerexec is the "docker" executor: it runs commands in a
// container with the Engine API's exec (streams demultiplexed, exit code
// from exec inspect) and copies files and trees in and out with its
// archive endpoint (tar streams). It takes deployments carrying
// exec:docker, such as those of the docker provider; the deployment's
// ResourceID is the container ID.
//
// Copy paths follow one rule both ways: dst names the copy itself, so
// CopyTo(ctx, d, "bin/agent", "/opt/nodemgr/agent") makes the file
// /opt/nodemgr/agent, and copying a tree makes (or merges into) the
// directory dst. A dst ending in "/" means "into": the copy is then
// dst/base(src). Missing parent directories are made (mode 0755). Modes,
// modification times and symbolic links (kept as links) are preserved;
// files copied into a container belong to the container's user, files
// copied out to the caller. When extracting a container's tar locally,
// entries that would land outside dst (.., absolute names, or writes
// through a symlink) are refused.
//
// Docker has no API to signal an exec'd process: when a command's Timeout
// or ctx ends it, the executor kills its process group from inside the
// container (kill -KILL -PGID, run as root), which needs a kill program or
// sh in the image and a local engine, whose /proc maps the exec's host
// PID to the container's.
package dockerexec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Capability is what a deployment must offer for this executor.
const Capability = records.CapDocker

// engine is the part of the Engine API client the executor uses.
type engine interface {
	ExecCreate(context.Context, string, client.ExecCreateOptions) (client.ExecCreateResult, error)
	ExecAttach(context.Context, string, client.ExecAttachOptions) (client.ExecAttachResult, error)
	ExecInspect(context.Context, string, client.ExecInspectOptions) (client.ExecInspectResult, error)
	ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerStatPath(context.Context, string, client.ContainerStatPathOptions) (client.ContainerStatPathResult, error)
	CopyToContainer(context.Context, string, client.CopyToContainerOptions) (client.CopyToContainerResult, error)
	CopyFromContainer(context.Context, string, client.CopyFromContainerOptions) (client.CopyFromContainerResult, error)
	Close() error
}

// Docker runs commands in, and copies files to and from, containers on
// one Docker engine.
type Docker struct {
	engine engine
}

// New returns an executor for the engine named by settings["host"]
// (DOCKER_HOST style; default $DOCKER_HOST, else the local socket). It
// does not contact the engine.
func New(settings map[string]string) (*Docker, error) {
	for k := range settings {
		if k != "host" {
			return nil, errdefs.Field("settings."+k, "unknown docker executor setting; known: host")
		}
	}
	c, err := dockerengine.Connect(settings["host"])
	if err != nil {
		return nil, fmt.Errorf("docker executor: %w", err)
	}
	return &Docker{engine: c}, nil
}

// Name is "docker".
func (e *Docker) Name() string { return "docker" }

// Capability is "exec:docker".
func (e *Docker) Capability() string { return Capability }

// Close releases the client's connections.
func (e *Docker) Close() error { return e.engine.Close() }

// Exec runs cmd in the container as its user and returns the exit code
// (128+n for a command killed by signal n). An error means the command
// could not be started, or was cut off by ctx or cmd.Timeout; the exit
// code is then -1.
func (e *Docker) Exec(ctx context.Context, d provision.Deployment, cmd execute.Command) (int, error) {
	id, err := containerID(e, d)
	if err != nil {
		return -1, err
	}
	ctx, cancel, err := cmd.Bound(ctx)
	if err != nil {
		return -1, err
	}
	defer cancel()
	name := cmd.Argv[0]

	cr, err := e.engine.ExecCreate(ctx, id, client.ExecCreateOptions{
		Cmd:          cmd.Argv,
		Env:          cmd.Env,
		WorkingDir:   cmd.Dir,
		AttachStdin:  cmd.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return -1, fmt.Errorf("exec %s in %s: %w", name, d.Name, cmd.CutOff(ctx, dockerengine.Classify(err)))
	}
	// Attaching starts the command. A cut-off during the request would
	// leave the engine starting a process the client no longer knows
	// about, and nothing to kill it: the request runs to its end (bounded
	// on its own), and a cut-off then takes the kill path below.
	startCtx, cancelStart := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	att, err := e.engine.ExecAttach(startCtx, cr.ID, client.ExecAttachOptions{})
	cancelStart()
	if err != nil {
		return -1, fmt.Errorf("exec %s in %s: %w", name, d.Name, cmd.CutOff(ctx, dockerengine.Classify(err)))
	}
	defer att.Close()

	if cmd.Stdin != nil {
		go func() {
			// The command may exit without reading it all; the
			// copy then ends at the next write.
			io.Copy(att.Conn, cmd.Stdin)
			att.CloseWrite()
		}()
	}
	stdout, stderr := orDiscard(cmd.Stdout), orDiscard(cmd.Stderr)
	// The engine reports a command it could not start on stdout; keep the
	// end of it to say why.
	var tail tailBuffer
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(io.MultiWriter(stdout, &tail), stderr, att.Reader)
		copied <- err
	}()

	select {
	case err = <-copied:
	case <-ctx.Done():
		att.Close()
		<-copied
		e.kill(cr.ID, id)
		return -1, fmt.Errorf("exec %s in %s: %w", name, d.Name, cmd.CutOff(ctx, ctx.Err()))
	}
	if err != nil {
		return -1, fmt.Errorf("exec %s in %s: output stream: %w", name, d.Name, err)
	}

	insp, err := e.waitExit(ctx, cr.ID)
	if err != nil {
		if ctx.Err() != nil {
			// Cut off after it closed its output: it may still run.
			e.kill(cr.ID, id)
		}
		return -1, fmt.Errorf("exec %s in %s: %w", name, d.Name, cmd.CutOff(ctx, err))
	}
	if insp.PID == 0 && (insp.ExitCode == 126 || insp.ExitCode == 127) {
		// It never ran: the runtime could not start it.
		why := strings.TrimSpace(tail.String())
		if why == "" {
			why = fmt.Sprintf("exit code %d", insp.ExitCode)
		}
		class := errdefs.ErrInvalid
		if insp.ExitCode == 127 || strings.Contains(why, "no such file") || strings.Contains(why, "not found") {
			class = errdefs.ErrNotFound
		}
		return -1, fmt.Errorf("exec %s in %s: could not start: %s: %w", name, d.Name, why, class)
	}
	return insp.ExitCode, nil
}

// startTimeout bounds the request that starts a command, which a cut-off
// does not end (see Exec).
const startTimeout = 30 * time.Second

// waitExit polls exec inspect until the engine has recorded the exit: the
// output stream can end a moment before it does.
func (e *Docker) waitExit(ctx context.Context, execID string) (client.ExecInspectResult, error) {
	delay := time.Millisecond
	for {
		insp, err := e.engine.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return insp, fmt.Errorf("inspect exec: %w", dockerengine.Classify(err))
		}
		if !insp.Running {
			return insp, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return insp, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// kill ends an exec'd command that was cut off, with its process group.
// It is best effort: see the package doc.
func (e *Docker) kill(execID, containerID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insp, err := e.runningExec(ctx, execID)
	if err != nil || !insp.Running || insp.PID <= 0 {
		return
	}
	pid := namespacePID(insp.PID)
	if pid <= 0 {
		return
	}
	p := strconv.Itoa(pid)
	// runc makes every exec'd process a session and group leader. On a
	// busy machine a kill can miss what the command forks at that moment,
	// or not run at all: it is repeated until no process of the group is
	// left (kill -0 fails), a few times at most.
	for range 5 {
		if code, ran := e.runAsRoot(ctx, containerID, "kill", "-KILL", "-"+p, p); !ran || code != 0 {
			e.runAsRoot(ctx, containerID, "/bin/sh", "-c", "kill -KILL -"+p+" "+p)
		}
		if code, ran := e.runAsRoot(ctx, containerID, "/bin/sh", "-c", groupLives, "sh", p); ran && code != 0 {
			return // none left
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// groupLives exits 0 while a process of group $1 runs in the container
// (a zombie does not count: the container's first process may never reap
// it); it needs only a POSIX shell and /proc.
const groupLives = `g=$1
for s in /proc/[0-9]*/stat; do
  read -r l <"$s" 2>/dev/null || continue
  set -- ${l##*) }
  [ "$1" != Z ] && [ "$3" = "$g" ] && exit 0
done
exit 1`

// runAsRoot runs a helper command in a container as root; ran is false
// when it could not be run.
func (e *Docker) runAsRoot(ctx context.Context, containerID string, argv ...string) (code int, ran bool) {
	cr, err := e.engine.ExecCreate(ctx, containerID, client.ExecCreateOptions{User: "0", Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return -1, false
	}
	att, err := e.engine.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return -1, false
	}
	io.Copy(io.Discard, att.Reader)
	att.Close()
	r, err := e.waitExit(ctx, cr.ID)
	if err != nil || r.PID == 0 && (r.ExitCode == 126 || r.ExitCode == 127) {
		return -1, false
	}
	return r.ExitCode, true
}

// runningExec inspects an exec that is to be killed. A command cut off
// early (a short timeout on a busy machine) may not have a process yet:
// the engine says so with no PID, no exit code and not running. Killing
// nothing then would leave it to start and run on, so wait for its
// process, until ctx ends.
func (e *Docker) runningExec(ctx context.Context, execID string) (client.ExecInspectResult, error) {
	for {
		insp, err := e.engine.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil || insp.Running || insp.PID > 0 || insp.ExitCode != 0 {
			return insp, err
		}
		select {
		case <-ctx.Done():
			return insp, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// namespacePID maps a host PID to the PID inside its innermost PID
// namespace, from /proc/PID/status; 0 if it cannot (a remote engine).
func namespacePID(hostPID int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(hostPID) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

func containerID(e execute.Executor, d provision.Deployment) (string, error) {
	if err := execute.Check(e, d); err != nil {
		return "", err
	}
	return d.Resource("container ID")
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct{ b []byte }

const tailSize = 1024

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.ToValidUTF8(t.b, nil)) }

var (
	_ execute.Executor = (*Docker)(nil)
	_ engine           = (*client.Client)(nil)
)
