package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/workerpool"
)

// Tasks with files (api.TaskSpec Inputs, Outputs, InputFrom) run in a
// sandbox of their own, made fresh for each attempt:
//
//	<suite work dir>/sandbox/<task>-<attempt>/
//
// filesSource sits between the worker pool and the server: a claimed task
// reaches the pool only once its inputs are in its sandbox, and a report
// leaves for the server only once its outputs are in the blob store. Inputs
// come from a cache by content hash in the agent's data dir, so a header
// that every compile task includes is fetched once per node; they are hard
// links to the cache's read-only copies (executables are copied, since a
// link shares its mode).

// stageParallel bounds the tasks of one fetch staged at once.
const stageParallel = 8

type filesSource struct {
	inner   workerpool.Source
	blobs   *blobClient
	root    string // sandboxes live here
	stopped <-chan struct{}
	log     *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]string   // task ID → its sandbox
	globs     map[string][]string // task ID → its output globs
	uploading map[string]bool     // tasks whose outputs are on their way
	uploads   sync.WaitGroup
}

func newFilesSource(inner workerpool.Source, blobs *blobClient, workDir string, stopped <-chan struct{}, log *slog.Logger) *filesSource {
	// Sandboxes left by an agent that stopped mid-task: no task of the
	// suite runs here before the pool starts.
	os.RemoveAll(filepath.Join(workDir, "sandbox"))
	return &filesSource{inner: inner, blobs: blobs, root: filepath.Join(workDir, "sandbox"), stopped: stopped,
		log:       log,
		sandboxes: map[string]string{}, globs: map[string][]string{}, uploading: map[string]bool{}}
}

func hasFiles(t api.TaskSpec) bool {
	return len(t.Inputs) > 0 || len(t.Outputs) > 0 || len(t.InputFrom) > 0
}

// Fetch claims tasks and stages the files of those that have some. A task
// whose inputs cannot be staged fails its attempt here, with the reason,
// and never reaches the pool.
func (f *filesSource) Fetch(ctx context.Context, max int) ([]api.Task, bool, error) {
	tasks, done, err := f.inner.Fetch(ctx, max)
	if err != nil || len(tasks) == 0 {
		return tasks, done, err
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
	return ready, done, nil
}

// stage makes the task's sandbox and puts its inputs there; the task's
// workdir becomes a path inside it.
func (f *filesSource) stage(ctx context.Context, t *api.Task) error {
	dir := filepath.Join(f.root, fmt.Sprintf("%s-%d", t.ID, t.Attempt))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f.mu.Lock()
	f.sandboxes[t.ID] = dir
	f.globs[t.ID] = t.Outputs
	f.mu.Unlock()
	for _, in := range t.Inputs {
		if in.Error != "" {
			return fmt.Errorf("input %s: %s", in.Path, in.Error)
		}
		if !filepath.IsLocal(filepath.FromSlash(in.Path)) {
			return fmt.Errorf("input %q: not a path inside the sandbox", in.Path)
		}
		if err := f.blobs.stageFile(ctx, in, filepath.Join(dir, filepath.FromSlash(in.Path))); err != nil {
			return fmt.Errorf("input %s: %w", in.Path, err)
		}
	}
	if t.Workdir != "" && !filepath.IsLocal(filepath.FromSlash(t.Workdir)) {
		return fmt.Errorf("workdir %q: not a path inside the sandbox", t.Workdir)
	}
	t.Workdir = filepath.Join(dir, filepath.FromSlash(t.Workdir))
	return os.MkdirAll(t.Workdir, 0o755)
}

// Report uploads a successful attempt's outputs, then sends the report on;
// the uploads run beside the pool so that other reports do not wait.
func (f *filesSource) Report(r api.TaskReport) {
	f.mu.Lock()
	dir, ok := f.sandboxes[r.TaskID]
	delete(f.sandboxes, r.TaskID)
	f.mu.Unlock()
	if !ok {
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
		if r.Outcome == api.OutcomeSucceeded {
			f.collect(&r, dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			f.log.Warn("remove a task's sandbox", "dir", dir, "err", err)
		}
		f.inner.Report(r)
	}()
}

// collect uploads the files matching the task's output globs into the
// result, noting globs that matched nothing. An upload the server refuses
// (a file over its size cap) fails the attempt; one it cannot take now is
// retried until the agent stops, and then the attempt counts as stopped.
func (f *filesSource) collect(r *api.TaskReport, dir string) {
	globs := f.outputGlobs(r.TaskID)
	f.mu.Lock()
	delete(f.globs, r.TaskID)
	f.mu.Unlock()
	files, missing, err := matchOutputs(dir, globs)
	r.Result.Missing = missing
	if err != nil {
		failAttempt(r, "collect outputs: "+err.Error())
		return
	}
	for _, rel := range files {
		out, err := f.blobs.upload(f.stopped, filepath.Join(dir, filepath.FromSlash(rel)), rel)
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
		os.RemoveAll(dir)
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
// the task source before it closes.
func (f *filesSource) drain() { f.uploads.Wait() }

// matchOutputs lists the regular files under dir that the globs match, as
// sorted slash paths (a matched directory gives the files below it), and
// the globs that matched nothing.
func matchOutputs(dir string, globs []string) (files, missing []string, err error) {
	seen := map[string]bool{}
	for _, g := range globs {
		matches, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(g)))
		if err != nil {
			return nil, nil, fmt.Errorf("glob %q: %w", g, err)
		}
		n := 0
		for _, m := range matches {
			err := filepath.WalkDir(m, func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				rel, err := filepath.Rel(dir, p)
				if err != nil || strings.HasPrefix(rel, "..") {
					return err
				}
				rel = filepath.ToSlash(rel)
				n++
				if !seen[rel] {
					seen[rel] = true
					files = append(files, rel)
				}
				return nil
			})
			if err != nil {
				return nil, nil, err
			}
		}
		if n == 0 {
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
	server   func() string // the replica the agent talks to now
	cred     func() string
	http     *http.Client // no overall timeout: files may be large
	cache    string       // <data dir>/blobs
	max      int64        // the cache's cap in bytes
	mu       sync.Mutex
	inflight map[string]chan struct{} // digest → closed when its download ends
	fetched  int64                    // bytes downloaded since the cache was last trimmed
}

func newBlobClient(server func() string, cred func() string, base *http.Client, dataDir string, max int64) *blobClient {
	c := &http.Client{Transport: base.Transport}
	return &blobClient{server: server, cred: cred, http: c,
		cache: filepath.Join(dataDir, "blobs"), max: max, inflight: map[string]chan struct{}{}}
}

// trim removes the least recently used cached files until the cache is
// at most 80% of its cap. Staged inputs are hard links, so a task running
// keeps its files.
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
			files = append(files, entry{p, info.Size(), info.ModTime()})
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
	hexd := strings.TrimPrefix(digest, "sha256:")
	if len(hexd) < 2 {
		return filepath.Join(c.cache, "invalid")
	}
	return filepath.Join(c.cache, hexd[:2], hexd)
}

// stageFile puts the input at dst: a hard link to the cached copy, or a
// copy where its mode differs from the cache's read-only one.
func (c *blobClient) stageFile(ctx context.Context, in api.TaskFile, dst string) error {
	src, err := c.cached(ctx, in.Digest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(in.Mode)
	if mode == 0 {
		mode = 0o644
	}
	if mode&0o111 == 0 {
		if err := os.Link(src, dst); err == nil {
			return nil
		}
	}
	return copyFile(src, dst, mode)
}

// cached returns the cache's copy of a blob, downloading it once however
// many tasks ask at the same time.
func (c *blobClient) cached(ctx context.Context, digest string) (string, error) {
	p := c.cachePath(digest)
	for {
		if _, err := os.Stat(p); err == nil {
			now := time.Now()
			os.Chtimes(p, now, now) // recently used: the last to be evicted
			return p, nil
		}
		c.mu.Lock()
		wait, busy := c.inflight[digest]
		if !busy {
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
		err := c.download(ctx, digest, p)
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

// download fetches a blob into the cache, checking its hash.
func (c *blobClient) download(ctx context.Context, digest, dst string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server()+"/v1/blobs/"+digest, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.cred())
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w", digest, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download %s: %w", digest, answerError(resp))
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("download %s: %w", digest, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("download %s: the content hashes to %s; the server's copy is damaged", digest, got)
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	if st, err := os.Stat(dst); err == nil {
		c.noteFetched(st.Size())
	}
	return nil
}

// upload stores a file in the blob store unless it is there already, and
// describes it as an output at rel. Failures the server may get over are
// retried until the agent stops.
func (c *blobClient) upload(stopped <-chan struct{}, path, rel string) (api.TaskFile, error) {
	digest, size, mode, err := hashFile(path)
	if err != nil {
		return api.TaskFile{}, err
	}
	out := api.TaskFile{Path: rel, Digest: digest, Size: size, Mode: uint32(mode.Perm())}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		retry, err := c.put(path, digest, size)
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
// failure may pass.
func (c *blobClient) put(path, digest string, size int64) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	head, err := http.NewRequestWithContext(ctx, http.MethodHead, c.server()+"/v1/blobs/"+digest, nil)
	if err != nil {
		return false, err
	}
	head.Header.Set("Authorization", "Bearer "+c.cred())
	if resp, err := c.http.Do(head); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return false, nil
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.server()+"/v1/blobs/"+digest, f)
	if err != nil {
		return false, err
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+c.cred())
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK:
		return false, nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return true, answerError(resp)
	}
	return false, answerError(resp)
}

func hashFile(path string) (digest string, size int64, mode os.FileMode, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, st.Mode(), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// credential is the node's current credential, for requests beside the
// WebSocket.
func (a *Agent) credential() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Credential
}
