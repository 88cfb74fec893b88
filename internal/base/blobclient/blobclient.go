// Package blobclient speaks the server's blob routes, /v1/blobs/{digest}:
// HEAD asks whether a blob is stored, PUT stores one, GET fetches one and
// checks that its content hashes to its digest. The Go client (the CLI's
// task inputs) and the agent (its input cache, task outputs) both use it;
// each says how its requests are made and sent, and how the server's
// error answers read in its own words.
package blobclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/nodemgr/nodemgr/internal/base/sha256sum"
)

// Client reaches one server's blob store.
type Client struct {
	// NewRequest makes a request for path on the server, with the
	// caller's credential.
	NewRequest func(ctx context.Context, method, path string, body io.Reader) (*http.Request, error)
	// Do sends a short request (HEAD).
	Do func(*http.Request) (*http.Response, error)
	// Stream sends a request whose body or answer is a whole blob: it
	// must have no overall timeout. Nil means Do.
	Stream func(*http.Request) (*http.Response, error)
	// AnswerError reads the server's error answer (its status is
	// resp.StatusCode); the methods return what it returns.
	AnswerError func(*http.Response) error
}

// Has says whether the server's blob store holds digest (for the caller).
func (c *Client) Has(ctx context.Context, digest string) (bool, error) {
	resp, err := c.send(ctx, http.MethodHead, digest, nil, 0)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, c.AnswerError(resp)
}

// Put stores size bytes read from body as digest. The server checks that
// they hash to it.
func (c *Client) Put(ctx context.Context, digest string, body io.Reader, size int64) error {
	resp, err := c.send(ctx, http.MethodPut, digest, body, size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return c.AnswerError(resp)
	}
	return nil
}

// Get writes the blob digest to w. A blob whose content does not hash to
// digest is an error, after w was given all of it.
func (c *Client) Get(ctx context.Context, digest string, w io.Writer) error {
	resp, err := c.send(ctx, http.MethodGet, digest, nil, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.AnswerError(resp)
	}
	h := sha256sum.New()
	if _, err := io.Copy(io.MultiWriter(w, h), resp.Body); err != nil {
		return err
	}
	if got := sha256sum.Sum(h); got != digest {
		return fmt.Errorf("the content hashes to %s; the server's copy is damaged", got)
	}
	return nil
}

// send makes a request on digest's route and sends it: a HEAD with Do,
// others, which carry a whole blob one way, with Stream.
func (c *Client) send(ctx context.Context, method, digest string, body io.Reader, size int64) (*http.Response, error) {
	req, err := c.NewRequest(ctx, method, "/v1/blobs/"+url.PathEscape(digest), body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if method == http.MethodHead || c.Stream == nil {
		return c.Do(req)
	}
	return c.Stream(req)
}
