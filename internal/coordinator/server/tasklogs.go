package server

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// A task attempt's output, whole: GET /v1/tasks/{task}/logs answers a piece
// of it as text, from the node that runs the attempt while it runs, and
// from the blob store (api.TaskLog) or the result's tails once it ended.
// The cursor is a byte offset in the attempt's log (package tasklog), the
// same in the live file and the stored copy, so a follower goes on across
// the attempt's end without a gap or a repeat.

// maxLogAnswer bounds one answer's piece of a stored log; a reader asks
// again from the cursor for the rest.
const maxLogAnswer = 4 << 20

// liveLogTimeout bounds the wait for the node's piece of a running log.
const liveLogTimeout = 10 * time.Second

// logPiece is what an answer carries.
type logPiece struct {
	frames   []byte
	next     int64
	complete bool // the attempt ended and frames reach the end of its log
}

func (s *Server) handleTaskLogs(w http.ResponseWriter, r *http.Request) error {
	t, err := s.resolveTask(r.Context(), r.PathValue("task"), dispatch.ReadSuite)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	attempt, err := logAttempt(q.Get("attempt"), t)
	if err != nil {
		return err
	}
	want, err := logStreams(q.Get("stream"))
	if err != nil {
		return err
	}
	after := int64(0)
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return errdefs.Field("after", "must be the %s of an earlier answer, got %q", api.HeaderLogCursor, v)
		}
	}
	piece := logPiece{next: after}
	if attempt > 0 {
		if piece, err = s.readTaskLog(r.Context(), t, attempt, after); err != nil {
			return err
		}
	}
	text, err := tasklog.Text(piece.frames, want)
	if err != nil {
		return fmt.Errorf("log of task %s attempt %d: %w", t.ID, attempt, err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set(api.HeaderLogAttempt, strconv.Itoa(attempt))
	h.Set(api.HeaderLogCursor, strconv.FormatInt(piece.next, 10))
	h.Set(api.HeaderLogComplete, strconv.FormatBool(piece.complete))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(text)
	return err
}

// logAttempt is the attempt asked for: by default the task's latest (0
// while it has started none).
func logAttempt(v string, t store.Task) (int, error) {
	if v == "" {
		return t.Attempt, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > t.Attempt {
		return 0, errdefs.Field("attempt", "task %s has started %d attempt(s): give 1..%d, got %q", t.ID, t.Attempt, t.Attempt, v)
	}
	return n, nil
}

// logStreams picks the streams an answer holds: all by default.
func logStreams(v string) (func(tasklog.Stream) bool, error) {
	switch v {
	case "", "all":
		return nil, nil
	case "stdout":
		return func(s tasklog.Stream) bool { return s == tasklog.Stdout }, nil
	case "stderr":
		return func(s tasklog.Stream) bool { return s == tasklog.Stderr }, nil
	}
	return nil, errdefs.Field("stream", "must be stdout, stderr or all, got %q", v)
}

// readTaskLog reads attempt's log from after: live from its node while it
// runs there, else what was kept of it.
func (s *Server) readTaskLog(ctx context.Context, t store.Task, attempt int, after int64) (logPiece, error) {
	if t.State == api.TaskRunning && attempt == t.Attempt && t.NodeID != "" {
		return s.liveTaskLog(ctx, t, attempt, after)
	}
	l, err := s.store.TaskLog(ctx, t.ID, attempt)
	if errdefs.IsNotFound(err) {
		return tailsLog(t, attempt, after), nil
	}
	if err != nil {
		return logPiece{}, err
	}
	return s.storedTaskLog(ctx, l, after)
}

// liveTaskLog asks the node for the piece of a running attempt's log. An
// attempt whose output still fits in memory (or whose log is on its way to
// the blob store) has none there yet: an empty piece, not complete.
func (s *Server) liveTaskLog(ctx context.Context, t store.Task, attempt int, after int64) (logPiece, error) {
	n, err := s.store.GetNode(ctx, t.NodeID)
	if err != nil {
		return logPiece{}, fmt.Errorf("log of task %s: its node: %w", t.ID, err)
	}
	q := url.Values{"suite": {t.SuiteID}, "attempt": {strconv.Itoa(attempt)}, "after": {strconv.FormatInt(after, 10)}}
	resp, err := s.hub.CallLocal(ctx, n, api.LocalRequest{Method: http.MethodGet,
		Path: "/v1/tasks/" + url.PathEscape(t.ID) + "/log", Query: q.Encode()}, liveLogTimeout)
	if err != nil {
		return logPiece{}, fmt.Errorf("log of running task %s: %w", t.ID, err)
	}
	switch resp.Status {
	case http.StatusOK:
		next, err := strconv.ParseInt(resp.Headers[api.HeaderLogCursor], 10, 64)
		if err != nil || next < after {
			return logPiece{}, fmt.Errorf("log of running task %s: node %s answered a bad cursor %q", t.ID, n.Name, resp.Headers[api.HeaderLogCursor])
		}
		return logPiece{frames: resp.Body, next: next}, nil
	case http.StatusNotFound:
		return logPiece{next: after}, nil
	}
	return logPiece{}, fmt.Errorf("log of running task %s: node %s answered %d: %s", t.ID, n.Name, resp.Status, resp.Body)
}

// storedTaskLog reads a piece of a log from the blob store.
func (s *Server) storedTaskLog(ctx context.Context, l api.TaskLog, after int64) (logPiece, error) {
	d, err := blob.ParseDigest(l.Digest)
	if err != nil {
		return logPiece{}, err
	}
	rc, _, err := s.files.Blobs.Open(ctx, d)
	if errdefs.IsNotFound(err) {
		return logPiece{}, errdefs.NotFound("the log %s is no longer in the blob store; the task's result keeps the last 64 KiB of each stream", l.Digest)
	}
	if err != nil {
		return logPiece{}, err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(bufio.NewReader(rc))
	if err != nil {
		return logPiece{}, fmt.Errorf("read log %s: %w", l.Digest, err)
	}
	br := bufio.NewReader(zr)
	if _, err := br.Discard(int(after)); err != nil {
		return logPiece{next: after, complete: true}, nil // at or past the end
	}
	frames, err := tasklog.ReadFrames(br, maxLogAnswer)
	if err != nil {
		return logPiece{}, fmt.Errorf("read log %s: %w", l.Digest, err)
	}
	_, err = br.Peek(1)
	return logPiece{frames: frames, next: after + int64(len(frames)), complete: err == io.EOF}, nil
}

// tailsLog is the log of an attempt that kept none, made of its result's
// tails (all of its output, stdout before stderr) or its failure's; a
// stopped attempt's is empty.
func tailsLog(t store.Task, attempt int, after int64) logPiece {
	var stdout, stderr string
	if attempt == t.Attempt && t.Result != nil {
		stdout, stderr = t.Result.Stdout, t.Result.Stderr
	} else {
		for _, f := range t.Failures {
			if f.Attempt == attempt {
				stdout, stderr = f.Stdout, f.Stderr
			}
		}
	}
	var frames []byte
	if stdout != "" {
		frames = tasklog.AppendFrame(frames, tasklog.Stdout, []byte(stdout))
	}
	boundary := int64(len(frames))
	if stderr != "" {
		frames = tasklog.AppendFrame(frames, tasklog.Stderr, []byte(stderr))
	}
	end := int64(len(frames))
	switch after {
	case 0:
		return logPiece{frames: frames, next: end, complete: true}
	case boundary:
		return logPiece{frames: frames[boundary:], next: end, complete: true}
	}
	return logPiece{next: max(after, end), complete: true} // nothing from there
}
