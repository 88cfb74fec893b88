// Package taskfiles decides who may store, find and read task files by
// digest, and collects those no task refers to.
//
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
package taskfiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tick"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
)

// Config tunes the task files.
type Config struct {
	MaxSize   int64         // the largest file
	Retention time.Duration // how long a file no task refers to is kept
}

// Store is what the task files need of the store.
type Store interface {
	NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, uploaded bool, err error)
	NodeReadsBlob(ctx context.Context, nodeID, digest string) (bool, error)
	BlobInGroups(ctx context.Context, digest string, groups []string) (bool, error)
	AddNodeBlob(ctx context.Context, nodeID, digest string) error
	AddBlobGroups(ctx context.Context, digest string, groups []string) error
	BlobsInUse(ctx context.Context) (map[string]bool, error)
	ForgetBlobGroups(ctx context.Context, digests []string) error
	ExpireCachedActions(ctx context.Context, before time.Time) (int, error)
}

// Files are the task files in the blob store, and who may reach them.
type Files struct {
	cfg   Config
	store Store
	Blobs blob.Store
	log   *slog.Logger
}

// New makes Files over the blob store.
func New(cfg Config, st Store, blobs blob.Store, logger *slog.Logger) *Files {
	return &Files{cfg: cfg, store: st, Blobs: blobs, log: logger}
}

// Caller is who asks for a blob by digest: a node (by its credential) or
// a user (by an API token).
type Caller struct {
	NodeID string
	User   auth.Principal
}

// Head says what is stored under d, to a caller who may learn it: one
// who may upload, and for whose groups d was uploaded.
func (f *Files) Head(ctx context.Context, c Caller, d blob.Digest) (blob.Info, error) {
	known, err := f.mayUpload(ctx, c, d, true)
	if err != nil {
		return blob.Info{}, err
	}
	if !known {
		return blob.Info{}, NotFound(d)
	}
	info, err := f.Blobs.Stat(ctx, d)
	if errdefs.IsNotFound(err) {
		return blob.Info{}, NotFound(d)
	}
	return info, err
}

// Put stores a file of length bytes (-1: unknown) under its digest d; the
// content must hash to it. Storing one that is there already costs only
// the upload.
func (f *Files) Put(ctx context.Context, c Caller, d blob.Digest, body io.Reader, length int64) (blob.Info, error) {
	if _, err := f.mayUpload(ctx, c, d, false); err != nil {
		return blob.Info{}, err
	}
	if length > f.cfg.MaxSize {
		return blob.Info{}, errdefs.TooLarge("body", "%d bytes is over the server's cap of %d bytes per file (--blob-max-size)", length, f.cfg.MaxSize)
	}
	info, err := f.Blobs.Put(ctx, body, d, f.cfg.MaxSize)
	if err != nil {
		return blob.Info{}, fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := f.recordUpload(ctx, c, d); err != nil {
		return blob.Info{}, fmt.Errorf("store blob %s: %w", d, err)
	}
	return info, nil
}

// MayRead checks that the caller may read d by its digest: a node while it
// holds a task that names it, and admins. Everyone else reads task outputs
// through their tasks.
func (f *Files) MayRead(ctx context.Context, c Caller, d blob.Digest) error {
	if c.NodeID == "" {
		return c.User.RequireAdmin("read a blob by digest (read task outputs with GET /v1/tasks/{task}/outputs/{path})")
	}
	ok, err := f.store.NodeReadsBlob(ctx, c.NodeID, d.String())
	if err != nil {
		return err
	}
	if !ok {
		return NotFound(d)
	}
	return nil
}

// Defaults of the blob store.
const (
	DefaultMaxSize   = 1 << 30
	DefaultRetention = 24 * time.Hour
	collectEvery     = time.Hour
)

// Open is the blob store given, or a directory in the data dir.
func Open(given blob.Store, dataDir string) (blob.Store, error) {
	if given != nil {
		return given, nil
	}
	dir := filepath.Join(dataDir, "blobs")
	if dataDir == "" {
		return nil, errors.New("blob store: no data dir to keep task files in; set one (--data-dir)")
	}
	return blob.NewDir(dir)
}

// NotFound is the one answer for a blob that is absent and for one the
// caller may not know of: telling them apart would tell whether another
// group holds a file.
func NotFound(d blob.Digest) error {
	return errdefs.NotFound("blob %s: not in the blob store, or not uploaded for you; upload it (PUT /v1/blobs/{digest})", d)
}

// mayUpload checks that the caller may check for and store blobs: an
// admin, a user with Write in some group, or a node that holds a task.
// With head, it also says whether the caller may learn that d exists: it
// was uploaded into one of the caller's groups.
func (f *Files) mayUpload(ctx context.Context, c Caller, d blob.Digest, head bool) (known bool, err error) {
	if c.NodeID != "" {
		holding, uploaded, err := f.store.NodeBlobScope(ctx, c.NodeID, d.String())
		if err != nil {
			return false, err
		}
		if !holding {
			return false, fmt.Errorf("node %s runs no task: a node checks and uploads task files only while it holds a task: %w", c.NodeID, errdefs.ErrPermission)
		}
		return uploaded, nil
	}
	if c.User.Admin {
		return true, nil
	}
	if len(writeGroups(c.User)) == 0 {
		return false, fmt.Errorf("upload task files: needs role %s in some group, to submit the tasks that use them; ask a group admin for it: %w",
			api.RoleWrite, errdefs.ErrPermission)
	}
	if !head {
		return false, nil
	}
	return f.store.BlobInGroups(ctx, d.String(), slices.Sorted(maps.Keys(c.User.Groups)))
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
func (f *Files) recordUpload(ctx context.Context, c Caller, d blob.Digest) error {
	if c.NodeID != "" {
		return f.store.AddNodeBlob(ctx, c.NodeID, d.String())
	}
	return f.store.AddBlobGroups(ctx, d.String(), writeGroups(c.User))
}

// Loop collects blobs that no task refers to, once they are older
// than the retention, so an upload made just before its tasks are
// submitted is never taken.
func (f *Files) Loop(ctx context.Context) {
	tick.Every(ctx, collectEvery, func() {
		if _, err := f.Collect(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("collect unused task files", "err", err)
		}
	})
}

// Collect deletes the action cache's entries unused for the retention,
// then the blobs neither a task nor an entry refers to that are older
// than the retention, and forgets the groups they were uploaded into.
func (f *Files) Collect(ctx context.Context) (blob.CollectStats, error) {
	expired, err := f.store.ExpireCachedActions(ctx, time.Now().Add(-f.cfg.Retention))
	if err != nil {
		return blob.CollectStats{}, err
	}
	if expired > 0 {
		f.log.Info("expired unused action cache entries", "entries", expired)
	}
	used, err := f.store.BlobsInUse(ctx)
	if err != nil {
		return blob.CollectStats{}, err
	}
	rec := &deleteRecorder{Store: f.Blobs}
	st, err := blob.Collect(ctx, rec, func(d blob.Digest) bool { return used[d.String()] },
		time.Now().Add(-f.cfg.Retention))
	if ferr := f.store.ForgetBlobGroups(ctx, rec.deleted); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if err == nil && st.Deleted > 0 {
		f.log.Info("collected unused task files", "deleted", st.Deleted, "freed_bytes", st.Freed, "kept", st.Kept)
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
