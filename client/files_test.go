package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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

// UploadFiles sends what the server lacks, several at once, and answers
// in the order asked; a file that cannot be read stops it with a
// *FileError naming that file.
func TestUploadFiles(t *testing.T) {
	var mu sync.Mutex
	stored := map[string]string{}
	inFlight, most := 0, 0
	overlapped := make(chan struct{}) // closed once two requests were in flight together
	var closeOnce sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == 2 {
			closeOnce.Do(func() { close(overlapped) })
		}
		mu.Unlock()
		select { // the first waits for company; one at a time it waits in vain
		case <-overlapped:
		case <-time.After(2 * time.Second):
		}
		mu.Lock()
		defer mu.Unlock()
		inFlight--
		d := strings.TrimPrefix(r.URL.Path, "/v1/blobs/")
		switch r.Method {
		case http.MethodHead:
			if _, ok := stored[d]; !ok {
				w.WriteHeader(http.StatusNotFound)
			}
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			stored[d] = string(b)
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	var files []LocalFile
	for i := range 8 {
		p := filepath.Join(dir, fmt.Sprintf("f%d.c", i))
		os.WriteFile(p, []byte(fmt.Sprintf("int f%d;", i)), 0o644)
		files = append(files, LocalFile{Path: p, Rel: fmt.Sprintf("src/f%d.c", i)})
	}
	c := New(srv.URL, "tok")
	calls := 0
	got, err := c.UploadFiles(context.Background(), files, func(Uploaded) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	for i, up := range got {
		if up.Input.Path != files[i].Rel || !up.Sent || stored[up.Input.Digest] != fmt.Sprintf("int f%d;", i) {
			t.Errorf("file %d: %+v, stored %q; want %s sent with its content", i, up, stored[up.Input.Digest], files[i].Rel)
		}
	}
	if calls != len(files) {
		t.Errorf("done was called %d times, want %d", calls, len(files))
	}
	if most < 2 || most > uploadParallel {
		t.Errorf("at most %d requests were in flight at once, want 2 to %d", most, uploadParallel)
	}

	missing := append(slices.Clone(files[:2]), LocalFile{Path: filepath.Join(dir, "gone.c"), Rel: "src/gone.c"})
	_, err = c.UploadFiles(context.Background(), missing, nil)
	var fe *FileError
	if !errors.As(err, &fe) || fe.File.Rel != "src/gone.c" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("UploadFiles with a missing file = %v, want a *FileError for src/gone.c that is os.ErrNotExist", err)
	}
}
