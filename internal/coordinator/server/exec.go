package server

import (
	"errors"
	"net/http"
	"path"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/catalog"
)

const (
	// maxExecBody fits catalog.MaxExecStdin in base64 with the rest of the
	// request.
	maxExecBody = catalog.MaxExecStdin/3*4 + maxBody
	// maxCopyBody caps an uploaded archive, which the server holds on disk
	// while the executor copies it.
	maxCopyBody = 1 << 30
)

// handleExec runs a command on a deployment and streams its output as
// NDJSON events, the exit code last. Errors found before the command is
// tried are ordinary error answers; after that, the last event says what
// went wrong.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecRequest
	if err := decodeJSONMax(r, &req, maxExecBody); err != nil {
		return err
	}
	cmd, err := catalog.CheckExec(req)
	if err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("run commands on machines"); err != nil {
		return err
	}
	d, e, err := s.catalog.ExecTarget(r.Context(), r.PathValue("deployment"), req.Via, false)
	if err != nil {
		return err
	}
	out := httpapi.StartNDJSON(w)
	last := s.catalog.RunExec(r.Context(), d, e, cmd, execOutput{out, "stdout"}, execOutput{out, "stderr"})
	out.Send(last) // a client that went away hears nothing more anyway
	return nil
}

// execOutput is one of an exec's output streams.
type execOutput struct {
	s      *httpapi.NDJSON
	stream string
}

func (o execOutput) Write(p []byte) (int, error) {
	if err := o.s.Send(api.ExecEvent{Stream: o.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// handleCopyTo takes a tar stream with one top-level entry (see
// archive.Write), unpacks it in a temporary directory and has the
// executor copy it to the path given.
func (s *Server) handleCopyTo(w http.ResponseWriter, r *http.Request) error {
	dst := r.URL.Query().Get("path")
	if err := catalog.CheckNodePath(dst); err != nil {
		return err
	}
	via := r.URL.Query().Get("via")
	if err := catalog.CheckVia(via); err != nil {
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
	if err := catalog.CheckNodePath(src); err != nil {
		return err
	}
	name := path.Base(src)
	if name == "/" {
		return errdefs.Field("path", "cannot copy the node's root directory; name a directory under it")
	}
	via := r.URL.Query().Get("via")
	if err := catalog.CheckVia(via); err != nil {
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
