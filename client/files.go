package client

import (
	"sync"

	"golang.org/x/sync/errgroup"

	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/blobclient"
	"github.com/nodemgr/nodemgr/internal/base/sha256sum"
)

// TaskFilter narrows TasksPage beyond the state.
type TaskFilter struct {
	State  string
	Name   string            // the task of this name
	Labels map[string]string // tasks carrying all these labels
}

// TasksFiltered lists a page of a suite's tasks that match f.
func (c *Client) TasksFiltered(ctx context.Context, suite string, f TaskFilter, p Page) (api.TaskList, error) {
	q := filter("state", f.State)
	if f.Name != "" {
		q.Set("name", f.Name)
	}
	for k, v := range f.Labels {
		q.Add("label", k+"="+v)
	}
	return call[api.TaskList](ctx, c, http.MethodGet, withQuery("/v1/suites/"+url.PathEscape(suite)+"/tasks", p.values(q)), nil)
}

// HashFile is the digest ("sha256:<hex>") and size of a local file.
func HashFile(path string) (digest string, size int64, err error) { return sha256sum.File(path) }

// HasBlob says whether the server's blob store holds the digest.
func (c *Client) HasBlob(ctx context.Context, digest string) (bool, error) {
	return c.blobs().Has(ctx, digest)
}

// UploadFile puts a local file into the server's blob store, unless it is
// there already, and returns it as a task input at rel (a slash path in
// the task's sandbox). uploaded says whether its bytes were sent.
func (c *Client) UploadFile(ctx context.Context, path, rel string) (in api.TaskFile, uploaded bool, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return api.TaskFile{}, false, err
	}
	if !st.Mode().IsRegular() {
		return api.TaskFile{}, false, fmt.Errorf("input %s is not a regular file", path)
	}
	digest, size, err := HashFile(path)
	if err != nil {
		return api.TaskFile{}, false, err
	}
	in = api.TaskFile{Path: rel, Digest: digest, Size: size, Mode: uint32(st.Mode().Perm())}
	blobs := c.blobs()
	if ok, err := blobs.Has(ctx, digest); err != nil || ok {
		return in, false, err
	}
	f, err := os.Open(path)
	if err != nil {
		return api.TaskFile{}, false, err
	}
	defer f.Close()
	if err := blobs.Put(ctx, digest, f, size); err != nil {
		return api.TaskFile{}, false, fmt.Errorf("upload %s: %w", path, err)
	}
	return in, true, nil
}

// LocalFile is a local file to upload as a task input: Path on this
// machine, Rel its slash path in the task's sandbox.
type LocalFile struct {
	Path, Rel string
}

// Uploaded is what became of one LocalFile: the input, and whether its
// bytes were sent (false: the server had them).
type Uploaded struct {
	Input api.TaskFile
	Sent  bool
}

// FileError is UploadFiles' error: which file, and what went wrong.
type FileError struct {
	File LocalFile
	Err  error
}

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// uploadParallel is how many files UploadFiles sends at once: each is a
// HEAD and maybe a PUT, mostly round trips, so a few in flight hide each
// other's latency (a 35-file build's upload took 84-240 ms one at a time).
const uploadParallel = 4

// UploadFiles uploads files as UploadFile does, a few at once, and
// returns what became of each, in order. done, when not nil, is called
// after each file, from one goroutine at a time. The first error stops
// it; it is a *FileError.
func (c *Client) UploadFiles(ctx context.Context, files []LocalFile, done func(Uploaded)) ([]Uploaded, error) {
	out := make([]Uploaded, len(files))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadParallel)
	var mu sync.Mutex
	for i, f := range files {
		g.Go(func() error {
			in, sent, err := c.UploadFile(ctx, f.Path, f.Rel)
			if err != nil {
				return &FileError{File: f, Err: err}
			}
			out[i] = Uploaded{Input: in, Sent: sent}
			if done != nil {
				mu.Lock()
				defer mu.Unlock()
				done(out[i])
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// blobs speaks the blob routes with this client's token, and its words
// for errors.
func (c *Client) blobs() *blobclient.Client {
	return &blobclient.Client{
		NewRequest: func(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
			return c.request(ctx, method, path, "", body)
		},
		Do:     c.sender(c.http),
		Stream: c.sender(c.stream),
		AnswerError: func(resp *http.Response) error {
			return answerError(resp.Request.Method, resp.Request.URL.RequestURI(), resp)
		},
	}
}

// sender sends requests with hc, saying how to reach the server when it
// cannot be reached.
func (c *Client) sender(hc *http.Client) func(*http.Request) (*http.Response, error) {
	return func(req *http.Request) (*http.Response, error) {
		resp, err := hc.Do(req)
		if err != nil {
			return nil, c.unreachable(req.Method, req.URL.RequestURI(), err)
		}
		return resp, nil
	}
}

// TaskOutput opens one output file of a task's result.
func (c *Client) TaskOutput(ctx context.Context, task, path string) (io.ReadCloser, int64, error) {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	req, err := c.request(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(task)+"/outputs/"+strings.Join(parts, "/"), "", nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.streamDo(req)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// TaskLogPiece is a piece of an attempt's output (GET /v1/tasks/{task}/logs).
type TaskLogPiece struct {
	Text    []byte
	Attempt int    // the attempt it is of; 0: the task has started none
	Cursor  string // pass as after for what follows
	// Complete: the attempt ended and Text reaches the end of its output.
	Complete bool
}

// TaskLogs reads a piece of a task attempt's output from after ("": the
// start). attempt 0 means the latest; stream is stdout, stderr or "" (all).
func (c *Client) TaskLogs(ctx context.Context, task string, attempt int, stream, after string) (TaskLogPiece, error) {
	q := url.Values{}
	if attempt > 0 {
		q.Set("attempt", strconv.Itoa(attempt))
	}
	if stream != "" {
		q.Set("stream", stream)
	}
	if after != "" {
		q.Set("after", after)
	}
	path := "/v1/tasks/" + url.PathEscape(task) + "/logs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.textResponse(ctx, path)
	if err != nil {
		return TaskLogPiece{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return TaskLogPiece{}, err
	}
	n, _ := strconv.Atoi(resp.Header.Get(api.HeaderLogAttempt))
	return TaskLogPiece{Text: b, Attempt: n, Cursor: resp.Header.Get(api.HeaderLogCursor),
		Complete: resp.Header.Get(api.HeaderLogComplete) == "true"}, nil
}
