// Package artifacttest serves a real artifact depot over HTTP for tests and
// builds the zip and tar.gz archives to put in it, hostile ones included
// (names that climb out, links that lead out, lying size headers).
package artifacttest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/node/artifact"
)

// Entry is one archive entry.
type Entry struct {
	Name string
	Body string
	// Mode holds the permission bits and, for a directory or a symlink,
	// fs.ModeDir or fs.ModeSymlink; 0 means a regular file, 0o644.
	Mode fs.FileMode
	// Link is a symlink's target, or with Hard, the entry a hard link
	// (tar only) points to.
	Link string
	Hard bool
	// Type, when set, is the raw tar type flag (for device files and such).
	Type byte
	// Size, when set, is the size the tar header declares instead of
	// len(Body): a lie.
	Size int64
}

var modTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// Zip builds a zip archive of entries.
func Zip(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		fh := &zip.FileHeader{Name: e.Name, Method: zip.Deflate, Modified: modTime}
		mode := e.Mode
		switch {
		case e.Link != "":
			mode = fs.ModeSymlink | 0o777
		case mode == 0:
			mode = 0o644
		}
		fh.SetMode(mode)
		if mode.IsDir() && !strings.HasSuffix(fh.Name, "/") {
			fh.Name += "/"
		}
		w, err := zw.CreateHeader(fh)
		if err != nil {
			t.Fatalf("zip %q: %v", e.Name, err)
		}
		body := e.Body
		if e.Link != "" {
			body = e.Link
		}
		if !mode.IsDir() {
			if _, err := w.Write([]byte(body)); err != nil {
				t.Fatalf("zip %q: %v", e.Name, err)
			}
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ZipLyingSize builds a zip with one deflated entry whose headers declare
// declared bytes while its data inflates to all of body: a zip bomb that
// hides its size.
func ZipLyingSize(t testing.TB, name string, body []byte, declared uint64) []byte {
	t.Helper()
	// Let zip deflate the body, then copy the raw entry under a header
	// that lies.
	honest := bytes.NewReader(Zip(t, Entry{Name: name, Body: string(body)}))
	zr, err := zip.NewReader(honest, honest.Size())
	if err != nil {
		t.Fatal(err)
	}
	f := zr.File[0]
	raw, err := f.OpenRaw()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(raw)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	fh := f.FileHeader
	fh.UncompressedSize64 = declared
	w, err := zw.CreateRaw(&fh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TarGz builds a gzipped tar archive of entries. An entry whose Size lies
// must come last: its body runs on past what its header declares.
func TarGz(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	closed := false
	for i, e := range entries {
		hdr := &tar.Header{Name: e.Name, ModTime: modTime, Mode: int64(e.Mode.Perm())}
		switch {
		case e.Type != 0:
			hdr.Typeflag = e.Type
		case e.Hard:
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, e.Link
		case e.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.Link, 0o777
		case e.Mode.IsDir():
			hdr.Typeflag = tar.TypeDir
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(e.Body))
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if e.Size != 0 {
			if i != len(entries)-1 {
				t.Fatalf("tar %q: an entry with a lying size must come last", e.Name)
			}
			hdr.Size = e.Size
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatalf("tar %q: %v", e.Name, err)
			}
			// Bypass the writer: the body, padding and end blocks go
			// straight into the stream.
			tb.WriteString(e.Body)
			tb.Write(make([]byte, (512-len(e.Body)%512)%512+1024))
			closed = true
			break
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar %q: %v", e.Name, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatalf("tar %q: %v", e.Name, err)
			}
		}
	}
	if !closed {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(tb.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Depot is an artifact depot: an HTTP server holding files by path below
// its base URL, URL, which goes in the depots map given to artifact.New.
// Paths given to its methods are relative to that base.
type Depot struct {
	srv *httptest.Server

	mu       sync.Mutex
	files    map[string][]byte
	handlers map[string]http.Handler
	gets     map[string]int
	fail     map[string]int
}

// NewDepot starts an empty depot, closed when the test ends.
func NewDepot(t testing.TB) *Depot {
	d := &Depot{
		files:    map[string][]byte{},
		handlers: map[string]http.Handler{},
		gets:     map[string]int{},
		fail:     map[string]int{},
	}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

// basePath is where the depot lives on its server, so that URLs with a
// path are exercised, as with real depots.
const basePath = "/sw/"

// URL is the depot's base URL, without a trailing slash.
func (d *Depot) URL() string { return d.srv.URL + strings.TrimSuffix(basePath, "/") }

func (d *Depot) serve(w http.ResponseWriter, r *http.Request) {
	p, inBase := strings.CutPrefix(r.URL.Path, basePath)
	if !inBase {
		http.NotFound(w, r)
		return
	}
	d.mu.Lock()
	d.gets[p]++
	fail := d.fail[p] > 0
	if fail {
		d.fail[p]--
	}
	h := d.handlers[p]
	body, ok := d.files[p]
	d.mu.Unlock()
	switch {
	case r.Method != http.MethodGet:
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
	case fail:
		http.Error(w, "injected failure", http.StatusInternalServerError)
	case h != nil:
		h.ServeHTTP(w, r)
	case !ok:
		http.NotFound(w, r)
	default:
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}
}

// Put serves body at path (relative to the base URL).
func (d *Depot) Put(path string, body []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files[path] = body
}

// Handle serves path with h instead of a fixed body.
func (d *Depot) Handle(path string, h http.Handler) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handlers[path] = h
}

// Delete stops serving path.
func (d *Depot) Delete(path string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.files, path)
	delete(d.handlers, path)
}

// FailNext makes the next n GETs of path answer 500.
func (d *Depot) FailNext(path string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail[path] = n
}

// Gets counts the GETs of path so far.
func (d *Depot) Gets(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gets[path]
}

// ArchivePath is where the depot keeps id's archive in format ext (".zip"
// or ".tar.gz"), relative to its base URL.
func ArchivePath(id artifact.ID, ext string) string {
	return id.Group + "/" + id.Artifact + "/" + id.Version + "/" + id.Artifact + "-" + id.Version + ext
}

// Publish puts archive in the depot as id's archive in format ext, with a
// .sha256 file beside it as sha256sum writes it, and returns its path.
func (d *Depot) Publish(id artifact.ID, ext string, archive []byte) string {
	p := ArchivePath(id, ext)
	sum := sha256.Sum256(archive)
	d.Put(p, archive)
	d.Put(p+".sha256", []byte(hex.EncodeToString(sum[:])+"  "+path.Base(p)+"\n"))
	return p
}
