package blobclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/sha256sum"
)

// server is a blob store that speaks the routes as the real one does:
// HEAD, PUT (checked against the digest) and GET, for the token "t".
func server(t *testing.T) (*httptest.Server, map[string][]byte) {
	var mu sync.Mutex
	blobs := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		d, ok := strings.CutPrefix(r.URL.Path, "/v1/blobs/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodHead, http.MethodGet:
			b, ok := blobs[d]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(b)
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			if got, _, _ := sha256sum.Reader(bytes.NewReader(b)); got != d {
				http.Error(w, "digest mismatch", http.StatusBadRequest)
				return
			}
			blobs[d] = b
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, blobs
}

// statusError is how the test's caller reads an error answer.
type statusError int

func (e statusError) Error() string { return http.StatusText(int(e)) }

func client(srv *httptest.Server, token string) *Client {
	return &Client{
		NewRequest: func(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, body)
			if err == nil {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return req, err
		},
		Do:          srv.Client().Do,
		AnswerError: func(resp *http.Response) error { return statusError(resp.StatusCode) },
	}
}

func TestPutHasGet(t *testing.T) {
	srv, blobs := server(t)
	c, ctx := client(srv, "t"), context.Background()
	content := []byte("a task's input")
	d, size, _ := sha256sum.Reader(bytes.NewReader(content))

	if has, err := c.Has(ctx, d); has || err != nil {
		t.Fatalf("Has(%s) before Put = %v, %v, want false, nil", d, has, err)
	}
	if err := c.Put(ctx, d, bytes.NewReader(content), size); err != nil {
		t.Fatalf("Put(%s) = %v", d, err)
	}
	if has, err := c.Has(ctx, d); !has || err != nil {
		t.Fatalf("Has(%s) after Put = %v, %v, want true, nil", d, has, err)
	}
	var got bytes.Buffer
	if err := c.Get(ctx, d, &got); err != nil || got.String() != string(content) {
		t.Fatalf("Get(%s) = %q, %v, want %q, nil", d, got.String(), err, content)
	}

	// A copy damaged in the store is an error, not a success.
	blobs[d] = []byte("something else")
	if err := c.Get(ctx, d, io.Discard); err == nil || !strings.Contains(err.Error(), "the server's copy is damaged") {
		t.Errorf("Get(damaged) = %v, want an error saying the copy is damaged", err)
	}
}

func TestErrorAnswersReadInTheCallersWords(t *testing.T) {
	srv, _ := server(t)
	ctx := context.Background()
	d, _, _ := sha256sum.Reader(strings.NewReader("x"))
	tests := []struct {
		name string
		call func(c *Client) error
		want statusError
	}{
		{"has, no credential", func(c *Client) error { _, err := client(srv, "wrong").Has(ctx, d); return err }, http.StatusUnauthorized},
		{"get, missing", func(c *Client) error { return c.Get(ctx, d, io.Discard) }, http.StatusNotFound},
		{"put, wrong content", func(c *Client) error { return c.Put(ctx, d, strings.NewReader("y"), 1) }, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var se statusError
			if err := tc.call(client(srv, "t")); !errors.As(err, &se) || se != tc.want {
				t.Errorf("error = %v, want %v", err, tc.want)
			}
		})
	}
}
