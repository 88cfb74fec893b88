package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// UploadFile asks first and sends only what the server lacks; an error
// answer reads as an *Error (a HEAD's has no body: the status alone).
func TestUploadFile(t *testing.T) {
	stored := map[string]string{}
	var puts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := strings.TrimPrefix(r.URL.Path, "/v1/blobs/")
		switch {
		case r.Header.Get("Authorization") != "Bearer tok":
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"code":"unauthenticated","message":"no such token"}}`)
		case r.Method == http.MethodHead:
			if _, ok := stored[d]; !ok {
				w.WriteHeader(http.StatusNotFound)
			}
		case r.Method == http.MethodPut:
			puts++
			b, _ := io.ReadAll(r.Body)
			stored[d] = string(b)
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	p := filepath.Join(t.TempDir(), "a.c")
	os.WriteFile(p, []byte("int main;"), 0o640)
	ctx := context.Background()
	c := New(srv.URL, "tok")
	for i, wantSent := range []bool{true, false} {
		in, sent, err := c.UploadFile(ctx, p, "src/a.c")
		if err != nil || sent != wantSent || in.Path != "src/a.c" || in.Size != 9 || in.Mode != 0o640 || !strings.HasPrefix(in.Digest, "sha256:") {
			t.Fatalf("UploadFile #%d = %+v, %v, %v, want src/a.c, 9 bytes, mode 0640, sent %v", i+1, in, sent, err, wantSent)
		}
		if stored[in.Digest] != "int main;" || puts != 1 {
			t.Errorf("after UploadFile #%d the server holds %q after %d PUTs, want the file's content after 1", i+1, stored[in.Digest], puts)
		}
	}
	_, _, err := New(srv.URL, "wrong").UploadFile(ctx, p, "src/a.c")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Errorf("UploadFile with a wrong token = %v, want an *Error with status 401", err)
	}
}
