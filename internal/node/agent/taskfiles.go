package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/blobclient"
	"github.com/nodemgr/nodemgr/internal/base/filecopy"
	"github.com/nodemgr/nodemgr/internal/base/sha256sum"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/node/runas"
	"github.com/nodemgr/nodemgr/internal/node/workerpool"
)

// Tasks with files (api.TaskSpec Inputs, Outputs, InputFrom) run in a
// sandbox of their own, made fresh for each attempt:
//
//	<suite work dir>/sandbox/<task>-<attempt>/
//
// filesSource sits between the worker pool and the server: a claimed task
// reaches the pool only once its inputs are in its sandbox, and a report
// leaves for the server only once its outputs are in the blob store.
// Inputs come from a cache by content hash in the agent's data dir, so a
// header that every compile task includes is fetched once per node.
//
// Inputs are immutable to tasks. The cache's files are the agent's, mode
// 0444, in a directory no one else may enter. Where tasks run as another
// user, an input is a hard link to the cached file: it costs nothing, and
// the task's user can read it but neither write it nor change its mode.
// Where they run as the agent's own user, a link would let a task write
// the cached copy (the owner may chmod it), so each input is a copy of its
// own (a reflink where the filesystem has them). Executables are copied
// either way, since a link shares its mode. A cached file is checked
// before each use (blobClient.cached).
//
// The sandbox is the task's user's, and that user's code may have left
// links in it: the agent reaches it only through an os.Root of the
// sandbox dir, so nothing it makes, reads or removes there can be outside,
// and output globs never follow a link (matchOutputs).

// stageParallel bounds the tasks of one fetch staged at once.
const stageParallel = 8

type filesSource struct {
	inner   workerpool.Source
	blobs   *blobClient
	root    string   // sandboxes live here: <work dir>/sandbox
	box     *os.Root // root, opened once: every sandbox is made and read through it
	as      *runas.User
	stopped <-chan struct{}
	log     *slog.Logger
	logs    suiteLogs // where attempts' full logs are, to store with their reports

	mu        sync.Mutex
	sandboxes map[string]string   // task ID → its sandbox's name in box
	globs     map[string][]string // task ID → its output globs
	uploading map[string]bool     // tasks whose outputs are on their way
	uploads   sync.WaitGroup
}

// newFilesSource makes the sandbox dir in the suite's work dir, the
// agent's own (root) even where the work dir is the suite user's, so that
// tasks change only their own sandboxes. as is the user tasks run as
// (nil: the agent's own).
func newFilesSource(inner workerpool.Source, blobs *blobClient, workDir string, as *runas.User, stopped <-chan struct{}, log *slog.Logger) (*filesSource, error) {
	work, err := os.OpenRoot(workDir)
	if err != nil {
		return nil, fmt.Errorf("sandboxes: %w", err)
	}
	defer work.Close()
	// Sandboxes left by an agent that stopped mid-task: no task of the
	// suite runs here before the pool starts.
	if err := work.RemoveAll("sandbox"); err != nil {
		return nil, fmt.Errorf("sandboxes: %w", err)
	}
	if err := work.Mkdir("sandbox", 0o755); err != nil {
		return nil, fmt.Errorf("sandboxes: %w", err)
	}
	box, err := work.OpenRoot("sandbox")
	if err != nil {
		return nil, fmt.Errorf("sandboxes: %w", err)
	}
	return &filesSource{inner: inner, blobs: blobs, root: filepath.Join(workDir, "sandbox"), box: box, as: as, stopped: stopped,
		log:       log,
		sandboxes: map[string]string{}, globs: map[string][]string{}, uploading: map[string]bool{}}, nil
}

func hasFiles(t api.TaskSpec) bool {
	return len(t.Inputs) > 0 || len(t.Outputs) > 0 || len(t.InputFrom) > 0
}

// Fetch claims tasks and stages the files of those that have some. A task
// whose inputs cannot be staged fails its attempt here, with the reason,
// and never reaches the pool.
func (f *filesSource) Fetch(ctx context.Context, max int) (tasks []api.Task, done, drained bool, err error) {
	tasks, done, drained, err = f.inner.Fetch(ctx, max)
	if err != nil || len(tasks) == 0 {
		return tasks, done, drained, err
	}
	failed := make([]error, len(tasks))
	sem := make(chan struct{}, stageParallel)
	var wg sync.WaitGroup
	for i := range tasks {
		if !hasFiles(tasks[i].TaskSpec) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			failed[i] = f.stage(ctx, &tasks[i])
		}()
	}
	wg.Wait()
	ready := tasks[:0]
	for i, t := range tasks {
		if failed[i] == nil {
			ready = append(ready, t)
			continue
		}
		f.removeSandbox(t.ID)
		if ctx.Err() != nil {
			// The pool is stopping, not the task failing: it runs again
			// elsewhere, uncounted.
			f.inner.Report(api.TaskReport{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeStopped,
				Reason: "the pool stopped while its inputs were staged", Result: api.TaskResult{ExitCode: -1}})
			continue
		}
		f.log.Warn("cannot stage the task's inputs; failing the attempt", "task", t.ID, "err", failed[i])
		f.inner.Report(api.TaskReport{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeFailed,
			Reason: "stage inputs: " + failed[i].Error(),
			Result: api.TaskResult{ExitCode: -1, Stderr: "nodemgr: stage inputs: " + failed[i].Error() + "\n"}})
	}
	return ready, done, drained, nil
}

// stage makes the task's sandbox and puts its inputs there; the task's
// workdir becomes a path inside it. The sandbox stays the agent's while
// it is filled, and its directories are given to the task's user at the
// end; the inputs stay the agent's.
func (f *filesSource) stage(ctx context.Context, t *api.Task) error {
	name := fmt.Sprintf("%s-%d", t.ID, t.Attempt)
	if err := f.box.RemoveAll(name); err != nil {
		return err
	}
	if err := f.box.Mkdir(name, 0o755); err != nil {
		return err
	}
	f.mu.Lock()
	f.sandboxes[t.ID] = name
	f.globs[t.ID] = t.Outputs
	f.mu.Unlock()
	box, err := f.box.OpenRoot(name)
	if err != nil {
		return err
	}
	defer box.Close()
	for _, in := range t.Inputs {
		if in.Error != "" {
			return fmt.Errorf("input %s: %s", in.Path, in.Error)
		}
		if err := validate.SandboxPath("input", in.Path); err != nil {
			return err
		}
		rel := filepath.FromSlash(in.Path)
		if err := box.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("input %s: %w", in.Path, err)
		}
		if err := f.blobs.stageFile(ctx, in, box, rel, f.as != nil); err != nil {
			return fmt.Errorf("input %s: %w", in.Path, err)
		}
	}
	if t.Workdir != "" {
		if err := validate.SandboxPath("workdir", t.Workdir); err != nil {
			return err
		}
	}
	wd := filepath.Join(".", filepath.FromSlash(t.Workdir))
	if err := box.MkdirAll(wd, 0o755); err != nil {
		return err
	}
	if err := giveDirs(box, f.as); err != nil {
		return err
	}
	t.Workdir = filepath.Join(f.root, name, wd)
	return nil
}

// giveDirs gives every directory in box to as (nil: nothing to do), so
// its tasks may make files there; the files (the inputs) stay the agent's.
func giveDirs(box *os.Root, as *runas.User) error {
	if as == nil {
		return nil
	}
	return fs.WalkDir(box.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if err := box.Lchown(filepath.FromSlash(p), int(as.UID), int(as.GID)); err != nil {
			return fmt.Errorf("give the sandbox to %s: %w", as, err)
		}
		return nil
	})
}

// Report uploads a successful attempt's outputs and any attempt's full
// log, then sends the report on; the uploads run beside the pool so that
// other reports do not wait.
func (f *filesSource) Report(r api.TaskReport) {
	f.mu.Lock()
	dir, ok := f.sandboxes[r.TaskID]
	delete(f.sandboxes, r.TaskID)
	f.mu.Unlock()
	logPath := f.logs.path(r.TaskID, r.Attempt)
	if logPath != "" {
		if _, err := os.Lstat(logPath); err != nil {
			logPath = "" // the output fit in the tails
		}
	}
	if !ok && logPath == "" {
		f.inner.Report(r)
		return
	}
	f.mu.Lock()
	f.uploading[r.TaskID] = true
	f.mu.Unlock()
	f.uploads.Add(1)
	go func() {
		defer f.uploads.Done()
		defer func() {
			f.mu.Lock()
			delete(f.uploading, r.TaskID)
			f.mu.Unlock()
		}()
		if ok {
			if r.Outcome == api.OutcomeSucceeded {
				f.collect(&r, dir)
			}
			if err := f.box.RemoveAll(dir); err != nil {
				f.log.Warn("remove a task's sandbox", "dir", filepath.Join(f.root, dir), "err", err)
			}
		}
		if logPath != "" {
			f.storeLog(&r, logPath, f.logs.max)
		}
		f.inner.Report(r)
	}()
}

// collect uploads the files matching the task's output globs into the
// result, noting globs that matched nothing. Globs that match more files
// than an attempt may return (api.MaxTaskOutputFiles) fail the attempt
// with nothing uploaded: a result without some of its files would pass
// for a whole one. An upload the server refuses (a file over its size
// cap) fails the attempt; one it cannot take now is retried until the
// agent stops, and then the attempt counts as stopped.
func (f *filesSource) collect(r *api.TaskReport, dir string) {
	globs := f.outputGlobs(r.TaskID)
	f.mu.Lock()
	delete(f.globs, r.TaskID)
	f.mu.Unlock()
	box, err := f.box.OpenRoot(dir)
	if err != nil {
		failAttempt(r, "collect outputs: "+err.Error())
		return
	}
	defer box.Close()
	files, missing, err := matchOutputs(box.FS(), globs, api.MaxTaskOutputFiles)
	r.Result.Missing = missing
	if err != nil {
		failAttempt(r, "collect outputs: "+err.Error())
		return
	}
	for _, rel := range files {
		open := func() (*os.File, error) { return box.Open(filepath.FromSlash(rel)) }
		out, err := f.blobs.upload(f.stopped, open, rel)
		if errors.Is(err, errStopped) {
			r.Outcome, r.Reason = api.OutcomeStopped, "the agent stopped while uploading outputs"
			return
		}
		if err != nil {
			failAttempt(r, fmt.Sprintf("upload output %s: %v", rel, err))
			return
		}
		r.Result.Outputs = append(r.Result.Outputs, out)
	}
}

func failAttempt(r *api.TaskReport, reason string) {
	r.Outcome, r.Reason = api.OutcomeFailed, reason
	r.Result.Stderr += "nodemgr: " + reason + "\n"
}

// outputGlobs are kept per task from its spec when it was staged.
func (f *filesSource) outputGlobs(taskID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.globs[taskID]
}

// Return removes the sandboxes of tasks that go back unstarted.
func (f *filesSource) Return(ids []string) {
	for _, id := range ids {
		f.removeSandbox(id)
	}
	f.inner.Return(ids)
}

func (f *filesSource) removeSandbox(id string) {
	f.mu.Lock()
	dir, ok := f.sandboxes[id]
	delete(f.sandboxes, id)
	delete(f.globs, id)
	f.mu.Unlock()
	if ok {
		f.box.RemoveAll(dir)
	}
}

// uploadingIDs lists the tasks whose outputs are on their way: the
// agent still answers for them when it reconnects.
func (f *filesSource) uploadingIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.uploading))
	for id := range f.uploading {
		ids = append(ids, id)
	}
	return ids
}

// drain waits for the uploads under way, so that every report has reached
// the task source before it closes, and lets go of the sandbox dir.
func (f *filesSource) drain() {
	f.uploads.Wait()
	f.box.Close()
}

// errTooManyOutputs: the globs match more files than an attempt may return.
var errTooManyOutputs = errors.New("too many output files")

// matchOutputs lists the regular files in sandbox that the globs match, as
// sorted slash paths (a matched directory gives the files below it), and
// the globs that matched nothing. Globs are matched against the tree as a
// walk finds it, entry by entry: a symbolic link is never followed nor
// taken, so no glob reaches out of the sandbox (an `out -> /etc` and an
// `out/*` glob give nothing). More than limit files is an error that
// says so, found without walking the rest.
func matchOutputs(sandbox fs.FS, globs []string, limit int) (files, missing []string, err error) {
	clean := make([]string, len(globs))
	depth := 0
	for i, g := range globs {
		clean[i] = path.Clean(filepath.ToSlash(g))
		if _, err := path.Match(clean[i], ""); err != nil {
			return nil, nil, fmt.Errorf("glob %q: %w", g, err)
		}
		depth = max(depth, strings.Count(clean[i], "/")+1)
	}
	found := make([]int, len(globs)) // files each glob brought
	under := map[string][]int{}      // matched directory → the globs that matched it
	seen := map[string]bool{}
	err = fs.WalkDir(sandbox, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var hits []int
		for i, g := range clean {
			if ok, _ := path.Match(g, p); ok {
				hits = append(hits, i)
			}
		}
		for a := p; a != "."; {
			a = path.Dir(a)
			hits = append(hits, under[a]...)
		}
		switch {
		case d.IsDir():
			if len(hits) > 0 {
				under[p] = hits
			} else if p != "." && strings.Count(p, "/")+1 >= depth {
				return fs.SkipDir // no glob can match below
			}
		case d.Type().IsRegular() && len(hits) > 0:
			for _, i := range hits {
				found[i]++
			}
			if !seen[p] {
				seen[p] = true
				files = append(files, p)
				if len(files) > limit {
					return errTooManyOutputs
				}
			}
		}
		return nil
	})
	if errors.Is(err, errTooManyOutputs) {
		return nil, nil, fmt.Errorf("the output globs match more than %d files, the most one attempt may return: "+
			"narrow the globs, or pack the files into an archive and make that the output", limit)
	}
	if err != nil {
		return nil, nil, err
	}
	for i, g := range globs {
		if found[i] == 0 {
			missing = append(missing, g)
		}
	}
	sort.Strings(files)
	return files, missing, nil
}

// errStopped says the agent stopped before a transfer could finish.
var errStopped = errors.New("agent stopping")

// blobClient moves task files between the server's blob store and this
// node: downloads into a cache by content hash, uploads from sandboxes.
type blobClient struct {
	wire  *blobclient.Client // to the replica the agent talks to now; no overall timeout: files may be large
	cache string             // <data dir>/blobs
	max   int64              // the cache's cap in bytes
	log   *slog.Logger
	// verifyEvery is how long a cached file's full hash is trusted; it is
	// hashed again at its first use after that (and at its first use
	// after the agent starts).
	verifyEvery time.Duration

	mu       sync.Mutex
	inflight map[string]chan struct{} // digest → closed when its download or check ends
	known    map[string]cacheEntry    // digest → what its cached file was when last hashed
	fetched  int64                    // bytes downloaded since the cache was last trimmed
}

// cacheEntry is what a cached file looked like when its content last
// hashed to its digest: a change of size or mtime since means it was
// written to.
type cacheEntry struct {
	size     int64
	mtime    time.Time
	verified time.Time
}

// defaultVerifyEvery: a cached input is hashed again at its first use
// once this long has passed; between, its size and mtime are checked at
// each use. Hashing costs about 1 s per GiB of inputs in use.
const defaultVerifyEvery = 10 * time.Minute

func newBlobClient(server func() string, cred func() string, base *http.Client, dataDir string, max int64) *blobClient {
	hc := &http.Client{Transport: base.Transport}
	wire := &blobclient.Client{
		NewRequest: func(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, method, server()+path, body)
			if err == nil {
				req.Header.Set("Authorization", "Bearer "+cred())
			}
			return req, err
		},
		Do: hc.Do,
		AnswerError: func(resp *http.Response) error {
			return &answer{status: resp.StatusCode, err: answerError(resp)}
		},
	}
	return &blobClient{wire: wire, log: slog.New(slog.DiscardHandler),
		cache: filepath.Join(dataDir, "blobs"), max: max, verifyEvery: defaultVerifyEvery,
		inflight: map[string]chan struct{}{}, known: map[string]cacheEntry{}}
}

// trim removes the least recently used cached files until the cache is
// at most 80% of its cap. Use is the access time, which cached sets;
// staged inputs are hard links or copies, so a task running keeps its
// files.
func (c *blobClient) trim() {
	type entry struct {
		path string
		size int64
		used time.Time
	}
	var files []entry
	var total int64
	filepath.WalkDir(c.cache, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".part-") {
			return nil
		}
		if info, err := d.Info(); err == nil {
			files = append(files, entry{p, info.Size(), accessTime(info)})
			total += info.Size()
		}
		return nil
	})
	if total <= c.max {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].used.Before(files[j].used) })
	for _, f := range files {
		if total <= c.max*8/10 {
			break
		}
		if os.Remove(f.path) == nil {
			total -= f.size
			c.mu.Lock()
			delete(c.known, sha256sum.Prefix+filepath.Base(f.path))
			c.mu.Unlock()
		}
	}
}

// noteFetched counts downloaded bytes and trims the cache once a tenth of
// its cap came in since the last look.
func (c *blobClient) noteFetched(n int64) {
	c.mu.Lock()
	c.fetched += n
	due := c.max > 0 && c.fetched >= c.max/10
	if due {
		c.fetched = 0
	}
	c.mu.Unlock()
	if due {
		c.trim()
	}
}

func (c *blobClient) cachePath(digest string) string {
	hexd := sha256sum.Hex(digest)
	if len(hexd) < 2 {
		return filepath.Join(c.cache, "invalid")
	}
	return filepath.Join(c.cache, hexd[:2], hexd)
}

// stageFile puts the input at rel in box: a hard link to the cached copy
// where link allows (the task runs as another user, who cannot write the
// agent's 0444 file) and the input's mode is the cache's, else a copy of
// its own.
func (c *blobClient) stageFile(ctx context.Context, in api.TaskFile, box *os.Root, rel string, link bool) error {
	src, err := c.cached(ctx, in.Digest)
	if err != nil {
		return err
	}
	mode := os.FileMode(in.Mode)
	if mode == 0 {
		mode = 0o644
	}
	if link && mode&0o111 == 0 {
		if err := linkInto(box, rel, src); err == nil {
			return nil
		}
	}
	return copyInto(box, rel, src, mode)
}

// cached returns the cache's copy of a blob, fetching it or checking it
// once however many tasks ask at the same time. A copy that changed since
// it was cached (the size or mtime differ, or its content no longer
// hashes to its digest, checked every verifyEvery) is evicted and fetched
// again: whatever wrote to it, a task's input is what was submitted.
func (c *blobClient) cached(ctx context.Context, digest string) (string, error) {
	p := c.cachePath(digest)
	for {
		c.mu.Lock()
		wait, busy := c.inflight[digest]
		if !busy {
			if c.freshLocked(digest, p) {
				c.mu.Unlock()
				touch(p)
				return p, nil
			}
			wait = make(chan struct{})
			c.inflight[digest] = wait
		}
		c.mu.Unlock()
		if busy {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		err := c.refresh(ctx, digest, p)
		c.mu.Lock()
		delete(c.inflight, digest)
		close(wait)
		c.mu.Unlock()
		if err != nil {
			return "", err
		}
		return p, nil
	}
}

// freshLocked says whether the cached file at p may be used as it is: it
// was hashed within verifyEvery and its size and mtime are as then.
func (c *blobClient) freshLocked(digest, p string) bool {
	e, ok := c.known[digest]
	if !ok || time.Since(e.verified) >= c.verifyEvery {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Size() == e.size && fi.ModTime().Equal(e.mtime)
}

// refresh makes the cached copy of digest good: it hashes the file there,
// if any, and evicts it if it changed since it was cached; then it
// downloads what is missing.
func (c *blobClient) refresh(ctx context.Context, digest, p string) error {
	fi, err := os.Lstat(p)
	if err == nil {
		c.mu.Lock()
		e, known := c.known[digest]
		c.mu.Unlock()
		why := ""
		switch {
		case !fi.Mode().IsRegular():
			why = "it is not a regular file"
		case known && (fi.Size() != e.size || !fi.ModTime().Equal(e.mtime)):
			why = "its size or modification time changed since it was cached"
		default:
			if got, _, err := sha256sum.File(p); err != nil {
				why = "it cannot be read: " + err.Error()
			} else if got != digest {
				why = "its content hashes to " + got
			}
		}
		if why == "" {
			c.remember(digest, fi)
			touch(p)
			return nil
		}
		c.log.Warn("a cached task input changed; fetching it again", "digest", digest, "why", why)
		c.mu.Lock()
		delete(c.known, digest)
		c.mu.Unlock()
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("evict the changed cached copy of %s: %w", digest, err)
		}
	}
	return c.download(ctx, digest, p)
}

// remember notes that the file fi, at digest's place in the cache, hashed
// to digest just now.
func (c *blobClient) remember(digest string, fi os.FileInfo) {
	c.mu.Lock()
	c.known[digest] = cacheEntry{size: fi.Size(), mtime: fi.ModTime(), verified: time.Now()}
	c.mu.Unlock()
}

// touch marks a cached file used now (its access time; the modification
// time says whether it changed): the last to be evicted.
func touch(p string) { os.Chtimes(p, time.Now(), time.Time{}) }

// download fetches a blob into the cache, checking its hash. The cache's
// directories are the agent's alone (0700), its files read-only.
func (c *blobClient) download(ctx context.Context, digest, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := c.wire.Get(ctx, digest, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("download %s: %w", digest, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	if st, err := os.Lstat(dst); err == nil {
		c.remember(digest, st)
		c.noteFetched(st.Size())
	}
	return nil
}

// upload stores a file (open opens it, from the sandbox) in the blob
// store unless it is there already, and describes it as an output at rel.
// Failures the server may get over are retried until the agent stops.
func (c *blobClient) upload(stopped <-chan struct{}, open func() (*os.File, error), rel string) (api.TaskFile, error) {
	f, err := open()
	if err != nil {
		return api.TaskFile{}, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return api.TaskFile{}, err
	}
	sum, size, err := sha256sum.Reader(f)
	f.Close()
	if err != nil {
		return api.TaskFile{}, err
	}
	out := api.TaskFile{Path: rel, Digest: sum, Size: size, Mode: uint32(st.Mode().Perm())}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		retry, err := c.put(open, sum, size)
		if err == nil {
			return out, nil
		}
		if !retry {
			return api.TaskFile{}, err
		}
		select {
		case <-stopped:
			return api.TaskFile{}, errStopped
		case <-time.After(wait):
		}
	}
}

// put sends one file unless the server has it; retry says whether a
// failure may pass: one on the way, or the server's 5xx or 429.
func (c *blobClient) put(open func() (*os.File, error), digest string, size int64) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if ok, _ := c.wire.Has(ctx, digest); ok {
		return false, nil // else PUT: its answer says what is wrong
	}
	f, err := open()
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = c.wire.Put(ctx, digest, f, size)
	var a *answer
	if errors.As(err, &a) {
		return a.status >= 500 || a.status == http.StatusTooManyRequests, a.err
	}
	return err != nil, err
}

// answer is the server's error answer to a blob request, with its status.
type answer struct {
	status int
	err    error
}

func (a *answer) Error() string { return a.err.Error() }
func (a *answer) Unwrap() error { return a.err }

// copyInto copies the file at src to rel in box, a file of its own with
// mode: a reflink where the filesystem can share the blocks, else a copy.
func copyInto(box *os.Root, rel, src string, mode os.FileMode) error {
	return filecopy.Opened(
		func() (*os.File, error) { return os.Open(src) },
		func() (*os.File, error) {
			out, err := box.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return nil, err
			}
			if err := out.Chmod(mode); err != nil { // past the umask
				out.Close()
				return nil, err
			}
			return out, nil
		})
}

// credential is the node's current credential, for requests beside the
// WebSocket.
func (a *Agent) credential() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Credential
}
