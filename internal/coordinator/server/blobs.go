package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
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
// A digest names content that may be anyone's, so who may see a blob by
// digest is asked of the store (store.TaskFiles) in the request itself,
// never from a cache:
//
//   - GET: a node, only while it holds (Running on it) a task that names
//     the digest as an input or runs after a task that output it; an
//     admin, any blob. Everyone else reads through their tasks.
//   - PUT: an admin, a user with Write in some group, or a node while it
//     holds a task. The content must hash to the digest, so a PUT proves
//     its caller had the content, and it answers the same whether the blob
//     was there or not. A node uploads outputs before it reports them, so
//     it may upload while it holds a task and not when it holds none: the
//     credential of an idle or removed node stores nothing. An upload that
//     no task names is collected after the retention.
//   - HEAD: the same callers as PUT. It says 200 only for a blob uploaded
//     into a group of the caller's (by a user with Write there, or by a
//     node running a task of the group; blobs that tasks named before
//     this rule count as uploaded into their suites' groups), and for a
//     node into the group of a suite it holds a task of. Anything else
//     answers exactly as an absent blob does (404, same body): HEAD tells
//     no group whether another holds a file. A submitter still uploads
//     each file once: its first upload records it for its groups, so the
//     next HEAD finds it, before or after tasks name it.
//
// Groups are recorded at upload rather than derived from the tasks that
// name a blob, which would cost an index entry per input of every task
// submitted, in random order; an upload costs far more than one entry.

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

// blobCaller is who asks for a blob by digest: a node (by its credential)
// or a user (by an API token).
type blobCaller struct {
	nodeID string
	user   auth.Principal
}

func (s *Server) blobCaller(r *http.Request) (blobCaller, error) {
	if auth.KindOf(bearer(r)) == api.TokenNode {
		t, err := s.authenticate(r.Context(), r, api.TokenNode)
		if err != nil {
			return blobCaller{}, err
		}
		return blobCaller{nodeID: t.NodeID}, nil
	}
	p, err := s.userPrincipal(r.Context(), r)
	if err != nil {
		return blobCaller{}, err
	}
	return blobCaller{user: p}, nil
}

// blobNotFound is the one answer for a blob that is absent and for one the
// caller may not know of: telling them apart would tell whether another
// group holds a file.
func blobNotFound(d blob.Digest) error {
	return errdefs.NotFound("blob %s: not in the blob store, or not uploaded for you; upload it (PUT /v1/blobs/{digest})", d)
}

// mayUpload checks that the caller may check for and store blobs: an
// admin, a user with Write in some group, or a node that holds a task.
// With head, it also says whether the caller may learn that d exists: it
// was uploaded into one of the caller's groups.
func (s *Server) mayUpload(ctx context.Context, c blobCaller, d blob.Digest, head bool) (known bool, err error) {
	if c.nodeID != "" {
		holding, uploaded, err := s.store.NodeBlobScope(ctx, c.nodeID, d.String())
		if err != nil {
			return false, err
		}
		if !holding {
			return false, fmt.Errorf("node %s runs no task: a node checks and uploads task files only while it holds a task: %w", c.nodeID, errdefs.ErrPermission)
		}
		return uploaded, nil
	}
	if c.user.Admin {
		return true, nil
	}
	if len(writeGroups(c.user)) == 0 {
		return false, fmt.Errorf("upload task files: needs role %s in some group, to submit the tasks that use them; ask a group admin for it: %w",
			api.RoleWrite, errdefs.ErrPermission)
	}
	if !head {
		return false, nil
	}
	return s.store.BlobInGroups(ctx, d.String(), slices.Sorted(maps.Keys(c.user.Groups)))
}

// writeGroups are the groups in which p may submit tasks.
func writeGroups(p auth.Principal) []string {
	var groups []string
	for g := range p.Groups {
		if p.Can(api.RoleWrite, []string{g}) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	return groups
}

// recordUpload notes the groups a blob was uploaded into: a user's
// groups with Write, a node's tasks' suites' groups.
func (s *Server) recordUpload(ctx context.Context, c blobCaller, d blob.Digest) error {
	if c.nodeID != "" {
		return s.store.AddNodeBlob(ctx, c.nodeID, d.String())
	}
	return s.store.AddBlobGroups(ctx, d.String(), writeGroups(c.user))
}

func blobDigest(r *http.Request) (blob.Digest, error) {
	d, err := blob.ParseDigest(r.PathValue("digest"))
	if err != nil {
		return blob.Digest{}, errdefs.Field("digest", "%v", err)
	}
	return d, nil
}

func (s *Server) handleHeadBlob(w http.ResponseWriter, r *http.Request) error {
	c, err := s.blobCaller(r)
	if err != nil {
		return err
	}
	d, err := blobDigest(r)
	if err != nil {
		return err
	}
	known, err := s.mayUpload(r.Context(), c, d, true)
	if err != nil {
		return err
	}
	if !known {
		return blobNotFound(d)
	}
	info, err := s.blobs.Stat(r.Context(), d)
	if errdefs.IsNotFound(err) {
		return blobNotFound(d)
	}
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
	c, err := s.blobCaller(r)
	if err != nil {
		return err
	}
	d, err := blobDigest(r)
	if err != nil {
		return err
	}
	if _, err := s.mayUpload(r.Context(), c, d, false); err != nil {
		return err
	}
	if r.ContentLength > s.cfg.BlobMaxSize {
		return errdefs.TooLarge("body", "%d bytes is over the server's cap of %d bytes per file (--blob-max-size)", r.ContentLength, s.cfg.BlobMaxSize)
	}
	info, err := s.blobs.Put(r.Context(), r.Body, d, s.cfg.BlobMaxSize)
	if err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := s.recordUpload(r.Context(), c, d); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "{\"digest\":%q,\"size\":%d}\n", info.Digest, info.Size)
	return nil
}

// handleGetBlob serves a blob by digest to a node that holds a task naming
// it, and to admins.
func (s *Server) handleGetBlob(w http.ResponseWriter, r *http.Request) error {
	c, err := s.blobCaller(r)
	if err != nil {
		return err
	}
	d, err := blobDigest(r)
	if err != nil {
		return err
	}
	switch {
	case c.nodeID != "":
		ok, err := s.store.NodeReadsBlob(r.Context(), c.nodeID, d.String())
		if err != nil {
			return err
		}
		if !ok {
			return blobNotFound(d)
		}
	default:
		if err := c.user.RequireAdmin("read a blob by digest (read task outputs with GET /v1/tasks/{task}/outputs/{path})"); err != nil {
			return err
		}
	}
	err = s.serveBlob(w, r, d, "")
	if errdefs.IsNotFound(err) {
		return blobNotFound(d)
	}
	return err
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
	rec := &deleteRecorder{Store: s.blobs}
	st, err := blob.Collect(ctx, rec, func(d blob.Digest) bool { return used[d.String()] },
		time.Now().Add(-s.cfg.BlobRetention))
	if ferr := s.store.ForgetBlobGroups(ctx, rec.deleted); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if err == nil && st.Deleted > 0 {
		s.log.Info("collected unused task files", "deleted", st.Deleted, "freed_bytes", st.Freed, "kept", st.Kept)
	}
	return st, err
}

// deleteRecorder notes the blobs a collection deleted, so that the groups
// they were uploaded into are forgotten with them. One uploaded again
// meanwhile may lose its groups: its next HEAD says 404 and it goes up
// once more.
type deleteRecorder struct {
	blob.Store
	deleted []string
}

func (r *deleteRecorder) Delete(ctx context.Context, d blob.Digest) error {
	err := r.Store.Delete(ctx, d)
	if err == nil {
		r.deleted = append(r.deleted, d.String())
	}
	return err
}
