package server

import (
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/taskfiles"
)

// blobCaller is who asks for a blob by digest: a node (by its credential)
// or a user (by an API token).
func (s *Server) blobCaller(r *http.Request) (taskfiles.Caller, error) {
	if auth.KindOf(bearer(r)) == api.TokenNode {
		t, err := s.authenticate(r.Context(), r, api.TokenNode)
		if err != nil {
			return taskfiles.Caller{}, err
		}
		return taskfiles.Caller{NodeID: t.NodeID}, nil
	}
	p, err := s.userPrincipal(r.Context(), r)
	if err != nil {
		return taskfiles.Caller{}, err
	}
	return taskfiles.Caller{User: p}, nil
}

// blobRequest is who asks for a blob, and its digest in the path.
func (s *Server) blobRequest(r *http.Request) (taskfiles.Caller, blob.Digest, error) {
	c, err := s.blobCaller(r)
	if err != nil {
		return c, blob.Digest{}, err
	}
	d, err := blob.ParseDigest(r.PathValue("digest"))
	if err != nil {
		return c, d, errdefs.Field("digest", "%v", err)
	}
	return c, d, nil
}

func (s *Server) handleHeadBlob(w http.ResponseWriter, r *http.Request) error {
	c, d, err := s.blobRequest(r)
	if err != nil {
		return err
	}
	info, err := s.files.Head(r.Context(), c, d)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.WriteHeader(http.StatusOK)
	return nil
}

// handlePutBlob stores a file under its digest; the content must hash to
// it. Storing one that is there already costs only the upload.
func (s *Server) handlePutBlob(w http.ResponseWriter, r *http.Request) error {
	c, d, err := s.blobRequest(r)
	if err != nil {
		return err
	}
	info, err := s.files.Put(r.Context(), c, d, r.Body, r.ContentLength)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "{\"digest\":%q,\"size\":%d}\n", info.Digest, info.Size)
	return nil
}

// handleGetBlob serves a blob by digest to a node that holds a task naming
// it, and to admins.
func (s *Server) handleGetBlob(w http.ResponseWriter, r *http.Request) error {
	c, d, err := s.blobRequest(r)
	if err != nil {
		return err
	}
	if err := s.files.MayRead(r.Context(), c, d); err != nil {
		return err
	}
	err = s.serveBlob(w, r, d, "")
	if errdefs.IsNotFound(err) {
		return taskfiles.NotFound(d)
	}
	return err
}

// serveBlob streams a blob; name, when set, is offered as the file name.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, d blob.Digest, name string) error {
	rc, info, err := s.files.Blobs.Open(r.Context(), d)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("X-Nodemgr-Digest", d.String())
	if name != "" {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(name)))
	}
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Debug("send blob", "digest", d, "err", err)
		panic(http.ErrAbortHandler) // the status is out; cut the body short
	}
	return nil
}

// handleGetTaskOutput streams one output file of a task's result.
func (s *Server) handleGetTaskOutput(w http.ResponseWriter, r *http.Request) error {
	t, err := s.resolveTask(r.Context(), r.PathValue("task"), dispatch.ReadSuite)
	if err != nil {
		return err
	}
	name := r.PathValue("path")
	if t.Result == nil {
		return errdefs.NotFound("output %s of task %s: the task has no result yet (it is %s)", name, t.ID, t.State)
	}
	for _, f := range t.Result.Outputs {
		if f.Path == name {
			d, err := blob.ParseDigest(f.Digest)
			if err != nil {
				return fmt.Errorf("output %s of task %s: %w", name, t.ID, err)
			}
			return s.serveBlob(w, r, d, f.Path)
		}
	}
	return errdefs.NotFound("output %s of task %s: the task produced no such file; see its result's outputs and missing", name, t.ID)
}
