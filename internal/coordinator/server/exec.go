package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

const (
	// maxExecStdin caps what an exec hands its command on stdin; more
	// belongs in a file copied to the node.
	maxExecStdin = 16 << 20
	// maxExecBody fits maxExecStdin in base64 with the rest of the request.
	maxExecBody = maxExecStdin/3*4 + maxBody
	// maxCopyBody caps an uploaded archive, which the server holds on disk
	// while the executor copies it.
	maxCopyBody = 1 << 30
)

// viaParam checks the executor a request names, if any.
func viaParam(via string) error {
	if via == "" {
		return nil
	}
	_, err := execute.Lookup("via", via)
	return err
}

// handleExec runs a command on a deployment and streams its output as
// NDJSON events, the exit code last. Errors found before the command is
// tried are ordinary error answers; after that, the last event says what
// went wrong.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecRequest
	if err := decodeJSONMax(r, &req, maxExecBody); err != nil {
		return err
	}
	if len(req.Argv) == 0 {
		return errdefs.Field("argv", "required: the command and its arguments")
	}
	if req.Argv[0] == "" {
		return errdefs.Field("argv[0]", "empty; name the program to run")
	}
	for i, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return errdefs.Field(fmt.Sprintf("env[%d]", i), "%q is not KEY=VALUE", kv)
		}
	}
	var timeout time.Duration
	if req.Timeout != "" {
		t, err := time.ParseDuration(req.Timeout)
		if err != nil || t <= 0 {
			return errdefs.Field("timeout", "%q is not a positive Go duration (30s, 5m)", req.Timeout)
		}
		timeout = t
	}
	if len(req.Stdin) > maxExecStdin {
		return errdefs.Field("stdin", "larger than %d MiB; copy the data to the node with nodemgr cp and redirect from the file", maxExecStdin>>20)
	}
	if err := viaParam(req.Via); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("run commands on machines"); err != nil {
		return err
	}
	d, e, err := s.catalog.ExecTarget(r.Context(), r.PathValue("deployment"), req.Via, false)
	if err != nil {
		return err
	}

	out := &execStream{w: w}
	out.start()
	cmd := execute.Command{Argv: req.Argv, Env: req.Env, Dir: req.Dir, Timeout: timeout,
		Stdout: execOutput{out, "stdout"}, Stderr: execOutput{out, "stderr"}}
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	code, err := e.Exec(r.Context(), d, cmd)
	last := api.ExecEvent{Exit: &code}
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		last = api.ExecEvent{Error: err.Error(), Code: api.CodeTimeout}
	default:
		if errdefs.Code(err) == "internal" && r.Context().Err() == nil {
			s.log.Error("exec failed", "deployment", d.ID, "name", d.Name, "argv0", req.Argv[0], "err", err)
		}
		last = api.ExecEvent{Error: errdefs.Message(err), Code: errdefs.Code(err)}
	}
	out.send(last) // a client that went away hears nothing more anyway
	return nil
}

// execStream writes an exec's events, one flushed NDJSON line each. Safe
// for concurrent use: the executors copy stdout and stderr in goroutines
// of their own.
type execStream struct {
	w http.ResponseWriter

	mu  sync.Mutex
	err error // the first write error: the client is gone
}

// start sends the status line, so that the client knows the command is
// being tried however long it stays silent.
func (s *execStream) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Header().Set("Content-Type", "application/x-ndjson")
	s.w.WriteHeader(http.StatusOK)
	s.flush()
}

func (s *execStream) send(ev api.ExecEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		s.err = err
		return err
	}
	s.flush()
	return s.err
}

func (s *execStream) flush() {
	if err := http.NewResponseController(s.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
}

// execOutput is one of an exec's output streams.
type execOutput struct {
	s      *execStream
	stream string
}

func (o execOutput) Write(p []byte) (int, error) {
	if err := o.s.send(api.ExecEvent{Stream: o.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// handleCopyTo takes a tar stream with one top-level entry (see
// archive.Write), unpacks it in a temporary directory and has the
// executor copy it to the path given.
func (s *Server) handleCopyTo(w http.ResponseWriter, r *http.Request) error {
	dst := r.URL.Query().Get("path")
	if err := nodePath(dst); err != nil {
		return err
	}
	via := r.URL.Query().Get("via")
	if err := viaParam(via); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("copy files to machines"); err != nil {
		return err
	}
	err := s.catalog.CopyTo(r.Context(), r.PathValue("deployment"), via, http.MaxBytesReader(w, r.Body, maxCopyBody), dst)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errdefs.TooLarge("body", "the archive is larger than %d GiB; copy less at a time", maxCopyBody>>30)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleCopyFrom has the executor copy a file or tree from the path given
// into a temporary directory, and answers with it as a tar stream with one
// top-level entry named after it.
func (s *Server) handleCopyFrom(w http.ResponseWriter, r *http.Request) error {
	src := r.URL.Query().Get("path")
	if err := nodePath(src); err != nil {
		return err
	}
	name := path.Base(src)
	if name == "/" {
		return errdefs.Field("path", "cannot copy the node's root directory; name a directory under it")
	}
	via := r.URL.Query().Get("via")
	if err := viaParam(via); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("copy files from machines"); err != nil {
		return err
	}
	fetched, err := s.catalog.CopyFrom(r.Context(), r.PathValue("deployment"), via, src)
	if err != nil {
		return err
	}
	defer fetched.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := fetched.Write(r.Context(), w); err != nil {
		if r.Context().Err() == nil {
			s.log.Error("send archive", "deployment", r.PathValue("deployment"), "path", src, "err", err)
		}
		// The status is out: cut the connection, so that the client
		// sees a broken archive rather than a short one.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// nodePath checks the path query parameter: an absolute path on the node.
func nodePath(p string) error {
	if p == "" {
		return errdefs.Field("path", "required: an absolute path on the node")
	}
	if !path.IsAbs(p) {
		return errdefs.Field("path", "%q is not absolute; give the full path on the node", p)
	}
	if len(p) > 4096 {
		return errdefs.TooLarge("path", "longer than 4096 bytes")
	}
	if i := strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return errdefs.Field("path", "has a control character (%q) at byte %d; no file name on the node has one", p[i], i)
	}
	return nil
}
