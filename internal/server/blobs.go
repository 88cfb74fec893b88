package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/blob"
	"github.com/nodemgr/nodemgr/internal/errdefs"
)

// Task files travel through the blob store (package blob), addressed by
// the SHA-256 of their content:
//
//   - a submitter uploads each input once (HEAD tells it what is there
//     already, so the headers every compile task shares go up once);
//   - an agent downloads inputs into its cache and uploads outputs;
//   - a user reads outputs through the task they belong to, so that
//     reading is checked against the suite like every other task read.
//
// Anyone who may submit tasks may upload; only nodes and admins read a
// blob by digest alone.

// Defaults of the blob store.
const (
	defaultBlobMaxSize   = 1 << 30
	defaultBlobRetention = 24 * time.Hour
	blobCollectEvery     = time.Hour
)

// openBlobs is the configured blob store, or a directory in the data dir.
func openBlobs(cfg Config) (blob.Store, error) {
	if cfg.Blobs != nil {
		return cfg.Blobs, nil
	}
	dir := filepath.Join(cfg.DataDir, "blobs")
	if cfg.DataDir == "" {
		return nil, errors.New("blob store: no data dir to keep task files in; set one (--data-dir)")
	}
	return blob.NewDir(dir)
}

// blobCaller authenticates a node credential or an API token.
func (s *Server) blobCaller(r *http.Request, read bool) error {
	if _, err := s.authenticate(r.Context(), r, api.TokenNode); err == nil {
		return nil
	}
	p, err := s.userPrincipal(r.Context(), r)
	if err != nil {
		return err
	}
	if read {
		return p.RequireAdmin("read a blob by digest (read task outputs with GET /v1/tasks/{task}/outputs/{path})")
	}
	return nil
}

func blobDigest(r *http.Request) (blob.Digest, error) {
	d, err := blob.ParseDigest(r.PathValue("digest"))
	if err != nil {
		return blob.Digest{}, errdefs.Field("digest", "%v", err)
	}
	return d, nil
}

func (s *Server) handleHeadBlob(w http.ResponseWriter, r *http.Request) error {
	if err := s.blobCaller(r, false); err != nil {
		return err
	}
	d, err := blobDigest(r)
	if err != nil {
		return err
	}
	info, err := s.blobs.Stat(r.Context(), d)
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
	if err := s.blobCaller(r, false); err != nil {
		return err
	}
	d, err := blobDigest(r)
	if err != nil {
		return err
	}
	if r.ContentLength > s.cfg.BlobMaxSize {
		return errdefs.TooLarge("body", "%d bytes is over the server's cap of %d bytes per file (--blob-max-size)", r.ContentLength, s.cfg.BlobMaxSize)
	}
	info, err := s.blobs.Put(r.Context(), r.Body, d, s.cfg.BlobMaxSize)
	if err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "{\"digest\":%q,\"size\":%d}\n", info.Digest, info.Size)
	return nil
}

func (s *Server) handleGetBlob(w http.ResponseWriter, r *http.Request) error {
	if err := s.blobCaller(r, true); err != nil {
		return err
	}
	d, err := blobDigest(r)
	if err != nil {
		return err
	}
	return s.serveBlob(w, r, d, "")
}

// serveBlob streams a blob; name, when set, is offered as the file name.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, d blob.Digest, name string) error {
	rc, info, err := s.blobs.Open(r.Context(), d)
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
	t, err := s.resolveTask(r.Context(), r.PathValue("task"), suiteRead)
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

// resolveInputs adds to a claimed task the outputs of the tasks its
// input_from names, as inputs. One that is not there becomes an input
// with an Error, and the agent fails the attempt with it.
func (s *Server) resolveInputs(ctx context.Context, t *api.Task) {
	for _, in := range t.InputFrom {
		dep, err := s.taskInSuite(ctx, t.SuiteID, in.Task)
		if err != nil {
			t.Inputs = append(t.Inputs, api.TaskFile{Path: orName(in.As, in.Path, in.Task), Error: err.Error()})
			continue
		}
		var outs []api.TaskFile
		if dep.Result != nil {
			outs = dep.Result.Outputs
		}
		found := false
		for _, f := range outs {
			if in.Path != "" && f.Path != in.Path {
				continue
			}
			found = true
			if in.As != "" {
				f.Path = in.As
			}
			t.Inputs = append(t.Inputs, f)
		}
		if !found && in.Path != "" {
			t.Inputs = append(t.Inputs, api.TaskFile{Path: orName(in.As, in.Path, in.Task),
				Error: fmt.Sprintf("task %s produced no output %s", in.Task, in.Path)})
		}
	}
}

func orName(names ...string) string {
	for _, n := range names {
		if n != "" {
			return n
		}
	}
	return ""
}

// blobLoop collects blobs that no task refers to, once they are older
// than the retention, so an upload made just before its tasks are
// submitted is never taken.
func (s *Server) blobLoop(ctx context.Context) {
	t := time.NewTicker(blobCollectEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.collectBlobs(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("collect unused task files", "err", err)
		}
	}
}

func (s *Server) collectBlobs(ctx context.Context) (blob.CollectStats, error) {
	used, err := s.store.BlobsInUse(ctx)
	if err != nil {
		return blob.CollectStats{}, err
	}
	st, err := blob.Collect(ctx, s.blobs, func(d blob.Digest) bool { return used[d.String()] },
		time.Now().Add(-s.cfg.BlobRetention))
	if err == nil && st.Deleted > 0 {
		s.log.Info("collected unused task files", "deleted", st.Deleted, "freed_bytes", st.Freed, "kept", st.Kept)
	}
	return st, err
}
