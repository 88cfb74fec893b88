package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// engine is the part of the Engine API client the manager uses.
type engine interface {
	ContainerCreate(context.Context, client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(context.Context, string, client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerList(context.Context, client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerStop(context.Context, string, client.ContainerStopOptions) (client.ContainerStopResult, error)
	ContainerRemove(context.Context, string, client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerStats(context.Context, string, client.ContainerStatsOptions) (client.ContainerStatsResult, error)
	ContainerLogs(context.Context, string, client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ImageInspect(context.Context, string, ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImagePull(context.Context, string, client.ImagePullOptions) (client.ImagePullResponse, error)
	Events(context.Context, client.EventsListOptions) client.EventsResult
}

// Timeouts of engine calls that run even when the caller's context is
// done (cleanup), or on the manager's own schedule.
const (
	cleanupTimeout = 30 * time.Second
	callTimeout    = 15 * time.Second
)

// ensureImage makes sure the engine has the image, as the job's pull
// policy says: never (there is no registry nodemgr can count on: the
// image must be on the node), if-not-present or always (pull).
func (m *Manager) ensureImage(ctx context.Context, ref, policy string) error {
	if policy != api.PullAlways {
		_, err := m.engine.ImageInspect(ctx, ref)
		if err == nil {
			return nil
		}
		if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("inspect image %q: %w", ref, dockerengine.Classify(err))
		}
		if policy != api.PullIfNotPresent {
			return errdefs.NotFound("image %q is not on this node and the job's pull_policy is never: put it on the node first, e.g. with docker load -i image.tar or docker import, or set pull_policy: if-not-present to pull it, then deploy again", ref)
		}
	}
	resp, err := m.engine.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(ctx)
		resp.Close()
	}
	if err != nil {
		return errdefs.NotFound("pull image %q (pull_policy %s): %v; put it on the node with docker load -i image.tar or docker import and use pull_policy: never, then deploy again", ref, policy, err)
	}
	return nil
}

// stopTimeout is the job's stop timeout in whole seconds, or the
// manager's.
func (m *Manager) stopTimeout(job api.ContainerJob) int {
	if d := time.Duration(job.StopTimeout); d > 0 {
		return int(math.Ceil(d.Seconds()))
	}
	return m.stopGrace
}

// containerName is the engine's name for a job's container: readable in
// docker ps, and unique per job ID.
func (m *Manager) containerName(job api.ContainerJob) string {
	name := "nodemgr-" + job.Name + "-" + job.ID
	if m.scope != "" {
		name += "-" + m.scope
	}
	return name
}

// scoped adds the manager's scope to a label filter, so that managers
// sharing an engine never touch each other's containers.
func (m *Manager) scoped(f client.Filters) client.Filters {
	if m.scope != "" {
		f.Add("label", workload.LabelScope+"="+m.scope)
	}
	return f
}

// createOptions turns a normalized job, with its host ports resolved,
// into the engine's create request.
func (m *Manager) createOptions(job api.ContainerJob, ports []api.ContainerPort, mounts []mount.Mount) client.ContainerCreateOptions {
	labels := maps.Clone(job.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[workload.LabelJob] = job.ID
	labels[workload.LabelName] = job.Name
	if m.scope != "" {
		labels[workload.LabelScope] = m.scope
	}

	env := make([]string, 0, len(job.Env))
	for _, k := range slices.Sorted(maps.Keys(job.Env)) {
		env = append(env, k+"="+job.Env[k])
	}

	exposed := network.PortSet{}
	bindings := network.PortMap{}
	for _, p := range ports {
		port, _ := network.PortFrom(uint16(p.Container), network.IPProtocol(p.Protocol))
		exposed[port] = struct{}{}
		bindings[port] = append(bindings[port], network.PortBinding{HostIP: m.hostIP, HostPort: strconv.Itoa(p.Host)})
	}

	memory := job.MemoryMB << 20
	var dns []netip.Addr
	if m.dns != nil {
		dns = m.dns()
	}
	return client.ContainerCreateOptions{
		Name: m.containerName(job),
		Config: &container.Config{
			Image:        job.Image,
			Cmd:          job.Command,
			Env:          env,
			Labels:       labels,
			ExposedPorts: exposed,
		},
		HostConfig: &container.HostConfig{
			DNS:          dns,
			PortBindings: bindings,
			Mounts:       mounts,
			// The agent restarts the job by its policy (watch.go): the
			// engine restarting it would hide exits from the job's status.
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
			Resources: container.Resources{
				NanoCPUs: int64(math.Round(job.CPUs * 1e9)),
				Memory:   memory,
				// Swap equal to memory means no swap: the limit is the limit.
				MemorySwap: memory,
			},
		},
	}
}

// create makes the container. A create cut off by ctx may have made it
// all the same; removeJobContainers finds it by its label.
func (m *Manager) create(ctx context.Context, opts client.ContainerCreateOptions) (string, error) {
	res, err := m.engine.ContainerCreate(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("create container: %w", dockerengine.Classify(err))
	}
	return res.ID, nil
}

func (m *Manager) start(ctx context.Context, id string) error {
	if _, err := m.engine.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container %.12s: %w", id, dockerengine.Classify(err))
	}
	return nil
}

// inspect returns the container, or an errdefs.ErrNotFound when it is gone.
func (m *Manager) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	return dockerengine.Inspect(ctx, m.engine, id)
}

// oomSettle is how long a SIGKILLed container of a job with a memory
// limit is watched for the engine's out-of-memory verdict: the engine
// can record the exit a moment before the kernel's OOM notice reaches it,
// and a look in between would call an OOM kill a plain exit code 137.
const oomSettle = 2 * time.Second

// inspectSettled is inspect, but gives a memory-limited job's container
// that was killed with no OOM recorded up to oomSettle for the verdict.
// oom says whether the engine called it an out-of-memory kill: in the
// container's state, or by an oom event in its event log (a SIGKILL
// alone is no verdict: docker kill, or a kill while the agent was down,
// sends one too).
func (m *Manager) inspectSettled(ctx context.Context, id string, memoryLimited bool) (insp container.InspectResponse, oom bool, err error) {
	insp, err = m.inspect(ctx, id)
	if err != nil || !memoryLimited {
		return insp, err == nil && insp.State.OOMKilled, err
	}
	deadline := time.Now().Add(oomSettle)
	for killedWithoutOOM(insp) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return insp, insp.State.OOMKilled, nil
		case <-time.After(100 * time.Millisecond):
		}
		next, err := m.inspect(ctx, id)
		if err != nil {
			break // what we saw stands
		}
		insp = next
	}
	if killedWithoutOOM(insp) {
		return insp, m.oomEventSeen(ctx, id, insp.State.StartedAt), nil
	}
	return insp, insp.State.OOMKilled, nil
}

func killedWithoutOOM(insp container.InspectResponse) bool {
	st := insp.State
	return st.Status == container.StateExited && st.ExitCode == 128+9 && !st.OOMKilled
}

// oomEventSeen reports whether the engine's event log holds an oom event
// for the container since it started: the engine's word where its state
// lost the verdict. A log that cannot be read says no.
func (m *Manager) oomEventSeen(ctx context.Context, id, startedAt string) bool {
	since := engineTime(startedAt)
	if since == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	f := client.Filters{}
	f.Add("type", "container")
	f.Add("container", id)
	f.Add("event", "oom")
	res := m.engine.Events(ctx, client.EventsListOptions{
		Since:   strconv.FormatInt(since.Add(-time.Second).Unix(), 10),
		Until:   strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10),
		Filters: f,
	})
	for {
		select {
		case <-res.Messages:
			return true
		case <-res.Err:
			return false // the log's end (io.EOF), or no log
		}
	}
}

// stopAndRemove stops the container, giving it grace seconds to exit on
// SIGTERM before SIGKILL, then removes it. One that is gone already is no
// error.
func (m *Manager) stopAndRemove(ctx context.Context, id string, grace int) error {
	_, err := m.engine.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &grace})
	if err != nil && !cerrdefs.IsNotFound(err) {
		m.log.Warn("stop container; removing it by force", "container", shortID(id), "err", err)
	}
	return m.remove(ctx, id)
}

// remove force-removes the container; one that is gone, or being removed
// already, is no error.
func (m *Manager) remove(ctx context.Context, id string) error {
	_, err := m.engine.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return fmt.Errorf("remove container %.12s: %w", id, dockerengine.Classify(err))
}

// removeJobContainers removes every container that carries the job's
// label: what a deploy cut short, or an agent crash, left behind.
func (m *Manager) removeJobContainers(ctx context.Context, jobID string) error {
	f := client.Filters{}
	f.Add("label", workload.LabelJob+"="+jobID)
	res, err := m.engine.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: m.scoped(f)})
	if err != nil {
		return fmt.Errorf("list containers of job %s: %w", jobID, dockerengine.Classify(err))
	}
	for _, s := range res.Items {
		if err := m.remove(ctx, s.ID); err != nil {
			return err
		}
	}
	return nil
}

// logs returns the container's stdout and stderr, demultiplexed and
// interleaved as the engine stored them, and the cursor where they end:
// the engine's time of the latest line. With after "" it gives the last
// tail lines (0: all); with a cursor, the lines after it, at most
// maxLogPiece bytes of them ("0" is before the first line).
func (m *Manager) logs(ctx context.Context, id string, tail int, after string) ([]byte, string, error) {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true}
	cursor := "0"
	lines := &timedLines{limit: maxLogPiece}
	switch {
	case after != "":
		since, err := parseCursor(after)
		if err != nil {
			return nil, "", err
		}
		if !since.IsZero() {
			opts.Since = since.Add(time.Nanosecond).Format(time.RFC3339Nano)
			cursor = after
		}
		lines.latest = since
	case tail > 0:
		opts.Tail = strconv.Itoa(tail)
	}
	r, err := m.engine.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, "", dockerengine.Classify(err)
	}
	defer r.Close()
	lines.cursor = cursor
	if after == "" {
		lines.limit = -1
	}
	if _, err := stdcopy.StdCopy(lines, lines, r); err != nil && !errors.Is(err, errEnough) {
		return nil, "", fmt.Errorf("read logs: %w", err)
	}
	lines.flush()
	return lines.out.Bytes(), lines.cursor, nil
}

// maxLogPiece bounds what one request for the rest of a log returns, under
// what a relayed answer carries whole.
const maxLogPiece = 512 << 10

var errEnough = errors.New("enough log for one answer")

// parseCursor reads a container log cursor: "0", or the time of a line.
func parseCursor(s string) (time.Time, error) {
	if s == "0" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errdefs.Field("after", "must be the %s of an earlier answer, got %q", api.HeaderLogCursor, s)
	}
	return t, nil
}

// timedLines takes the engine's log lines, each led by its time and a
// space, and keeps the text and, as the cursor, the latest time seen; it
// stops once limit bytes are kept (limit < 0: no limit). The latest, not
// the last: the engine stamps stdout and stderr lines as it reads each
// stream, so the file's order can put a line after one stamped later, and
// the last line's time would bring that one again.
type timedLines struct {
	out     bytes.Buffer
	partial []byte
	cursor  string
	latest  time.Time
	limit   int
}

func (l *timedLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p...)
			break
		}
		l.line(append(l.partial, p[:i+1]...))
		l.partial = l.partial[:0]
		p = p[i+1:]
		if l.limit >= 0 && l.out.Len() >= l.limit {
			return n, errEnough
		}
	}
	return n, nil
}

// flush takes a last line that had no newline.
func (l *timedLines) flush() {
	if len(l.partial) > 0 {
		l.line(l.partial)
		l.partial = nil
	}
}

func (l *timedLines) line(b []byte) {
	ts, text, ok := bytes.Cut(b, []byte(" "))
	at, err := time.Parse(time.RFC3339Nano, string(ts))
	if !ok || err != nil {
		l.out.Write(b) // not led by a time: keep it whole
		return
	}
	if at.After(l.latest) {
		l.latest, l.cursor = at, string(ts)
	}
	l.out.Write(text)
}

// observation is what the engine says of a job's container, in the
// job's terms.
type observation struct {
	status     string
	reason     string
	exitCode   *int
	startedAt  *time.Time
	finishedAt *time.Time
}

// removedReason is why a job whose container is gone from the engine (a
// docker rm -f behind the agent's back) ended.
const removedReason = "removed outside nodemgr: the engine no longer has the container"

// observe maps the container's engine state onto a job status. gone says
// the container no longer exists; oom that the engine called its end an
// out-of-memory kill (see inspectSettled).
func observe(insp container.InspectResponse, gone, oom bool) observation {
	if gone {
		// Someone ended it, as a kill does (FAILED); DEAD says the engine
		// or the kernel did (out of memory).
		return observation{status: api.ContainerFailed, reason: removedReason}
	}
	st := insp.State
	o := observation{startedAt: engineTime(st.StartedAt), finishedAt: engineTime(st.FinishedAt)}
	switch st.Status {
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		o.status = api.ContainerRunning
		o.finishedAt = nil
	case container.StateCreated:
		o.status = api.ContainerCreating
	case container.StateRemoving:
		// Someone removes it; the destroy event, or the next look, finds
		// it gone.
		o.status = api.ContainerRunning
	case container.StateDead:
		o.status, o.reason = api.ContainerDead, "the engine reports the container dead"
		if st.Error != "" {
			o.reason += ": " + st.Error
		}
	default: // exited
		code := st.ExitCode
		o.exitCode = &code
		switch {
		case oom || st.OOMKilled:
			o.status, o.reason = api.ContainerDead, "out of memory"
		case code == 0:
			o.status = api.ContainerCompleted
		default:
			// A SIGKILL with no OOM verdict is someone's kill (docker
			// kill, a kill while the agent was away): say so, not OOM.
			o.status, o.reason = api.ContainerFailed, exitReason(code)
			if st.Error != "" {
				o.reason += ": " + st.Error
			}
		}
	}
	return o
}

// exitReason says how a container ended: its exit code and, for a code
// above 128 (the shell's and the engine's way to say "killed by signal
// code-128"), the signal.
func exitReason(code int) string {
	r := fmt.Sprintf("exit code %d", code)
	if code > 128 && code < 128+65 {
		if name := unix.SignalName(syscall.Signal(code - 128)); name != "" {
			r += ": killed by " + name
		} else {
			r += fmt.Sprintf(": killed by signal %d", code-128)
		}
	}
	return r
}

// engineTime parses the engine's timestamps, where the zero time means
// "not yet".
func engineTime(s string) *time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.IsZero() || t.Year() <= 1 {
		return nil
	}
	t = t.UTC()
	return &t
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

var _ engine = (*client.Client)(nil)
