package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// process is one run of a service: a child this supervisor started, or a
// process it adopted from an earlier agent.
type process struct {
	pid       int
	startTime uint64 // see record.StartTime
	startedAt time.Time
	done      chan struct{} // closed once it has exited
	// leader signals the process itself, never a stranger that got its
	// pid after it was reaped.
	leader func(syscall.Signal) error

	// Set before done is closed.
	status  string // how it ended: "exit status 3", "signal: killed", "unknown"
	success bool   // it exited 0; false when the status is unknown
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process's group, and to the process itself in
// case it left the group, unless it has exited.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	gerr := signalGroup(p.pid, sig)
	if err := p.leader(sig); err != nil && gerr != nil {
		return err
	}
	return nil
}

// logFile is the log a service's stdout and stderr are appended to.
func logFile(runtimeDir string) string { return filepath.Join(runtimeDir, logName) }

// logName is logFile within the runtime dir.
var logName = filepath.Join("logs", "service.log")

// openRuntime opens a service's runtime dir. It is the service's user's,
// who may leave links there; the supervisor, often root, reaches what is
// inside only through this os.Root, so nothing it writes, truncates or
// reads there is outside. (Its parents are the supervisor's.)
func openRuntime(runtimeDir string) (*os.Root, error) { return os.OpenRoot(runtimeDir) }

// openLog opens the service log for appending, making its dir if needed.
func openLog(runtimeDir string) (*os.File, error) {
	root, err := openRuntime(runtimeDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := root.MkdirAll("logs", 0o755); err != nil {
		return nil, err
	}
	return root.OpenFile(logName, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

// reachable checks that the user cred names (nil: the supervisor's own)
// can reach the service's program and runtime dir: a prefix under a
// directory others may not pass is a clear error, not "permission denied"
// from exec.
func reachable(cred *syscall.Credential, name string, paths ...string) error {
	if cred == nil {
		return nil
	}
	u := runas.User{Name: name, UID: cred.Uid, GID: cred.Gid, Groups: cred.Groups}
	for _, p := range paths {
		if err := runas.Reach(u, p); err != nil {
			return fmt.Errorf("the service runs as another user: %w", err)
		}
	}
	return nil
}

// credential is who a spec's process runs as (nil: the supervisor's own
// user): its user, resolved by the Users policy, or the policy's
// unprivileged default where it names none. A user the node lacks, or one
// this supervisor cannot switch to, is a field error on user.
func (s *Supervisor) credential(name string) (*syscall.Credential, error) {
	if s.cfg.Users == nil {
		return credential(name)
	}
	u, err := s.cfg.Users.Resolve("user", name)
	if err != nil || !s.cfg.Users.Other(u) {
		return nil, err
	}
	return u.Credential(), nil
}

// launch starts one run of a service. Its stdout and stderr go straight to
// the log file, opened O_APPEND: no pipe passes through the agent, so the
// service neither dies of SIGPIPE nor blocks when the agent is gone.
func (s *Supervisor) launch(sv *svc, spec api.ServiceSpec, tree string, port int) (*process, error) {
	coord := sv.coord
	runtimeDir := coord.RuntimeDir(s.cfg.Prefix)
	prog, err := resolveProgram(tree, "command[0]", spec.Command[0])
	if err != nil {
		return nil, err
	}
	cred, err := s.credential(spec.User)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runtimeDir, 0o755); err != nil {
		return nil, err
	}
	if err := reachable(cred, spec.User, prog, runtimeDir); err != nil {
		return nil, err
	}
	log, err := openLog(runtimeDir)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own copy
	if err := giveRuntimeDir(runtimeDir, spec, cred); err != nil {
		return nil, err
	}
	rl, err := s.prepareLimits(sv, spec.Limits)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:   prog,
		Args:   append([]string{prog}, serviceArgs(spec)...),
		Dir:    runtimeDir,
		Env:    s.serviceEnv(coord, spec, tree, port),
		Stdout: log,
		Stderr: log,
	}
	detach(cmd)
	setCredential(cmd, cred)
	if err := s.startIn(sv, cmd, rl); err != nil {
		return nil, fmt.Errorf("start process: %w", err)
	}
	if err := s.afterStart(sv, rl); err != nil {
		signalGroup(cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return nil, fmt.Errorf("set the limits: %w", err)
	}
	// Read the start time before anything can reap the child, so the
	// pid surely is still ours.
	start, err := procStartTime(cmd.Process.Pid)
	if err != nil {
		signalGroup(cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return nil, fmt.Errorf("read start time of pid %d: %w", cmd.Process.Pid, err)
	}
	p := &process{pid: cmd.Process.Pid, startTime: start, startedAt: time.Now(), done: make(chan struct{})}
	// os.Process tracks the child until it is waited for (with a pidfd
	// where it can), so its Signal never reaches a stranger.
	p.leader = func(sig syscall.Signal) error { return cmd.Process.Signal(sig) }
	go func() {
		err := cmd.Wait()
		p.status, p.success = describeExit(cmd.ProcessState, err)
		if rl.oomKilled() {
			p.status += fmt.Sprintf(" (OOM: killed by the kernel over its limits.memory_mb of %d)", rl.runMB)
			p.success = false
		}
		close(p.done)
	}()
	return p, nil
}

// adopt watches a process an earlier agent started. It is not our child,
// so its exit status cannot be collected.
func (s *Supervisor) adopt(pid int, start uint64, startedAt time.Time) *process {
	p := &process{pid: pid, startTime: start, startedAt: startedAt, done: make(chan struct{})}
	p.leader = func(sig syscall.Signal) error {
		if !alive(pid, start) {
			return nil // gone; the pid may be a stranger's now
		}
		return signalPID(pid, sig)
	}
	go func() {
		if waitExit(pid, start, s.quit, s.cfg.ProcPollInterval) {
			p.status = "unknown"
			close(p.done)
		}
	}()
	return p
}

func describeExit(st *os.ProcessState, err error) (string, bool) {
	if st == nil {
		if err == nil {
			return "unknown", false
		}
		return err.Error(), false
	}
	return st.String(), st.Success()
}

// resolveProgram finds argv[0]: an absolute path as it is, a relative one
// in the artifact's tree, which it must not leave, also not through a
// symlink.
// field names argv[0] in errors.
func resolveProgram(tree, field, name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	path := filepath.Join(tree, name)
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", errdefs.Field(field, "%q is not in the artifact's tree %s; fix the path or install an artifact version that has it", name, tree)
	}
	realTree, err := filepath.EvalSymlinks(tree)
	if err != nil {
		return "", err
	}
	if !within(realTree, real) {
		return "", errdefs.Field(field, "%q resolves to %s, outside the artifact's tree", name, real)
	}
	return path, nil
}

// within reports whether path is dir or below it. Both must be clean.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// serviceArgs are Command[1:] followed by the options as --key=value, in
// key order so that restarts see the same argv.
func serviceArgs(spec api.ServiceSpec) []string {
	args := append([]string(nil), spec.Command[1:]...)
	for _, k := range slices.Sorted(maps.Keys(spec.Options)) {
		args = append(args, "--"+k+"="+spec.Options[k])
	}
	return args
}

// serviceEnv is the environment of a service and of its drain command.
// Later entries win, so the spec's Env cannot mask what nodemgr sets.
func (s *Supervisor) serviceEnv(coord workload.Coordinate, spec api.ServiceSpec, tree string, port int) []string {
	env := append([]string(nil), s.baseEnv...)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	env = append(env,
		"NODEMGR_RUNTIME_DIR="+coord.RuntimeDir(s.cfg.Prefix),
		"NODEMGR_SOFTWARE_DIR="+tree,
		"NODEMGR_COORDINATE="+coord.String(),
		"NODEMGR_SERVICE_INSTANCE="+coord.Instance,
		"NODEMGR_SERVICE_SERVICE="+coord.Service,
		"NODEMGR_SERVICE_USER="+coord.User,
		"NODEMGR_SERVICE_CELL="+coord.Cell,
	)
	for _, k := range slices.Sorted(maps.Keys(spec.Options)) {
		env = append(env, "NODEMGR_OPT_"+envName(k)+"="+spec.Options[k])
	}
	if port > 0 {
		p := strconv.Itoa(port)
		env = append(env, "PORT="+p, "NODEMGR_PORT="+p)
	}
	return env
}

// envName turns an option name into the tail of an environment variable
// name: upper case, anything but letters and digits becomes '_'.
func envName(k string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, k)
}

// runDrainCommand runs a spec's drain command in the runtime dir with the
// service's environment, its output appended to the service log. It is
// killed, with its process group, when ctx ends.
func (s *Supervisor) runDrainCommand(ctx context.Context, coord workload.Coordinate, spec api.ServiceSpec, tree string, port int) error {
	runtimeDir := coord.RuntimeDir(s.cfg.Prefix)
	prog, err := resolveProgram(tree, "drain.command[0]", spec.Drain.Command[0])
	if err != nil {
		return err
	}
	cred, err := s.credential(spec.User)
	if err != nil {
		return err
	}
	log, err := openLog(runtimeDir)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, prog, spec.Drain.Command[1:]...)
	cmd.Dir = runtimeDir
	cmd.Env = s.serviceEnv(coord, spec, tree, port)
	cmd.Stdout, cmd.Stderr = log, log
	detach(cmd)
	setCredential(cmd, cred) // as the service: it is the service's command
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err != nil && ctx.Err() != nil {
		return errors.Join(err, ctx.Err())
	}
	return err
}
