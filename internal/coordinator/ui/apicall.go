package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// apiError is an API answer other than 2xx: its status and the API's own
// message, which the page shows as it is (it already says what to do).
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// statusOf is the HTTP status an error should give the page: the API's own
// where it answered, else 502.
func statusOf(err error) int {
	if e, ok := err.(*apiError); ok {
		return e.Status
	}
	return http.StatusBadGateway
}

// caller makes API requests in-process, as the holder of token.
type caller struct {
	h     http.Handler
	token string
}

// answer is a buffered API response; the API's bodies are bounded by its
// paging, and logs by their tail, so buffering is safe.
type answer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (a *answer) Header() http.Header { return a.header }
func (a *answer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}
func (a *answer) Write(b []byte) (int, error) {
	if a.code == 0 {
		a.code = http.StatusOK
	}
	return a.body.Write(b)
}

// do sends one request to the API handler and returns its answer; an
// answer other than 2xx is an *apiError.
func (c caller) do(ctx context.Context, method, path string, q url.Values, body any) (*answer, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RequestURI = target
	a := &answer{header: http.Header{}}
	c.h.ServeHTTP(a, req)
	if a.code == 0 {
		a.code = http.StatusOK
	}
	if a.code/100 != 2 {
		return a, decodeError(a)
	}
	return a, nil
}

func decodeError(a *answer) error {
	var eb api.ErrorBody
	if err := json.Unmarshal(a.body.Bytes(), &eb); err != nil || eb.Error.Message == "" {
		return &apiError{Status: a.code, Message: fmt.Sprintf("the API answered %d %s", a.code, strings.TrimSpace(a.body.String()))}
	}
	return &apiError{Status: a.code, Message: eb.Error.Message}
}

// get decodes a GET's JSON answer into out.
func (c caller) get(ctx context.Context, path string, q url.Values, out any) error {
	a, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(a.body.Bytes(), out); err != nil {
		return fmt.Errorf("GET %s: decode the answer: %w", path, err)
	}
	return nil
}

// send makes a state-changing request; its answer's body is not needed.
func (c caller) send(ctx context.Context, method, path string, body any) error {
	_, err := c.do(ctx, method, path, nil, body)
	return err
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }
