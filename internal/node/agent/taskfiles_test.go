package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestMatchOutputs: globs match the sandbox's tree as a walk finds it; a
// link is never followed, so an output glob cannot reach out of the
// sandbox, and past the cap on files an attempt returns it stops.
func TestMatchOutputs(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("node credential"), 0o600)
	tests := []struct {
		name        string
		files       []string          // regular files to make
		links       map[string]string // link → target ("OUTSIDE": the dir outside the sandbox)
		globs       []string
		limit       int
		wantFiles   []string
		wantMissing []string
		wantErr     string
	}{
		{name: "files, dirs and globs",
			files: []string{"a.o", "b.o", "sub/c.o", "out/x/y.txt", "keep.c"},
			globs: []string{"*.o", "out", "*.a", "sub/*.o", "a.o"}, limit: 10,
			wantFiles: []string{"a.o", "b.o", "out/x/y.txt", "sub/c.o"}, wantMissing: []string{"*.a"}},
		{name: "a dir matched by a glob brings its tree",
			files: []string{"build/x/y/z.bin", "build/top.bin", "other/q"},
			globs: []string{"bui*"}, limit: 10,
			wantFiles: []string{"build/top.bin", "build/x/y/z.bin"}},
		{name: "the sandbox itself",
			files: []string{"a", "d/b"}, globs: []string{"."}, limit: 10,
			wantFiles: []string{"a", "d/b"}},
		{name: "a link to a dir outside is not followed",
			files: []string{"real.txt"},
			links: map[string]string{"out": "OUTSIDE"},
			globs: []string{"out/*", "out", "*"}, limit: 10,
			wantFiles: []string{"real.txt"}, wantMissing: []string{"out/*", "out"}},
		{name: "a link to a file is not taken",
			files: []string{"real.txt"},
			links: map[string]string{"cred": "OUTSIDE/secret", "alias.txt": "real.txt"},
			globs: []string{"cred", "alias.txt"}, limit: 10,
			wantMissing: []string{"cred", "alias.txt"}},
		{name: "a link to a dir inside is not followed either",
			files: []string{"real/f"},
			links: map[string]string{"view": "real"},
			globs: []string{"view/*"}, limit: 10,
			wantMissing: []string{"view/*"}},
		{name: "the cap on files",
			files: []string{"1", "2", "3", "4"}, globs: []string{"*"}, limit: 3,
			wantErr: "match more than 3 files"},
		{name: "as many as the cap",
			files: []string{"1", "2", "3"}, globs: []string{"*", "1"}, limit: 3,
			wantFiles: []string{"1", "2", "3"}},
		{name: "a bad glob", files: []string{"a"}, globs: []string{"[a"}, limit: 3, wantErr: "glob"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(dir, f)
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(f), 0o644)
			}
			for link, target := range tc.links {
				os.Symlink(strings.Replace(target, "OUTSIDE", outside, 1), filepath.Join(dir, link))
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			files, missing, err := matchOutputs(root.FS(), tc.globs, tc.limit)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("matchOutputs(%q) = %v, %v, %v; want an error saying %q", tc.globs, files, missing, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(files, tc.wantFiles) || !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("matchOutputs(%q) = %q, missing %q, %v; want %q, missing %q", tc.globs, files, missing, err, tc.wantFiles, tc.wantMissing)
			}
		})
	}
}

// TestBlobCacheFetchesOnce: many tasks staging the same input at once
// download it once; a damaged download is refused.
func TestBlobCacheFetchesOnce(t *testing.T) {
	content := []byte("#define X 1\n")
	sum := sha256.Sum256(content)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer cred" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		gets.Add(1)
		if strings.HasSuffix(r.URL.Path, digest) {
			w.Write(content)
			return
		}
		w.Write([]byte("not what was asked for"))
	}))
	defer srv.Close()
	c := newBlobClient(func() string { return srv.URL }, func() string { return "cred" }, srv.Client(), t.TempDir(), 1<<20)
	sandbox := t.TempDir()
	box, err := os.OpenRoot(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := filepath.Join("t"+string(rune('a'+i)), "x.h")
			box.MkdirAll(filepath.Dir(dst), 0o755)
			if err := c.stageFile(context.Background(), api.TaskFile{Path: "x.h", Digest: digest}, box, dst, true); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := gets.Load(); n != 1 {
		t.Errorf("the server was asked %d times, want once", n)
	}
	got, err := os.ReadFile(filepath.Join(sandbox, "tc", "x.h"))
	if err != nil || string(got) != string(content) {
		t.Errorf("staged file = %q, %v", got, err)
	}
	bad := "sha256:" + strings.Repeat("0", 64)
	err = c.stageFile(context.Background(), api.TaskFile{Path: "y", Digest: bad}, box, "y", true)
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("stage a blob whose content does not match = %v, want an error saying it is damaged", err)
	}
}

// TestBlobCacheTrim: past its cap the cache drops the least recently used
// files first.
func TestBlobCacheTrim(t *testing.T) {
	c := newBlobClient(func() string { return "http://unused" }, func() string { return "" }, http.DefaultClient, t.TempDir(), 100)
	now := time.Now()
	for i, name := range []string{"old", "mid", "new"} {
		p := filepath.Join(c.cache, "ab", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, make([]byte, 40), 0o444)
		at := now.Add(time.Duration(i-3) * time.Minute)
		os.Chtimes(p, at, at)
	}
	c.trim() // 120 bytes > 100: down to 80 or less
	for name, want := range map[string]bool{"old": false, "mid": true, "new": true} {
		_, err := os.Stat(filepath.Join(c.cache, "ab", name))
		if got := err == nil; got != want {
			t.Errorf("after trim, %s kept = %v, want %v", name, got, want)
		}
	}
}

// recordSource is a workerpool.Source that keeps the reports it is given.
type recordSource struct {
	mu      sync.Mutex
	reports []api.TaskReport
}

func (s *recordSource) Fetch(context.Context, int) ([]api.Task, bool, bool, error) {
	return nil, true, false, nil
}
func (s *recordSource) Return([]string) {}
func (s *recordSource) Report(r api.TaskReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, r)
}

// TestOutputOverTheCapFailsTheAttempt: an output the server refuses as too
// large fails the attempt with the server's reason, instead of a success
// without its file.
func TestOutputOverTheCapFailsTheAttempt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		w.Write([]byte(`{"error":{"code":"too_large","message":"body: 5 bytes is over the server's cap of 4 bytes per file (--blob-max-size)"}}`))
	}))
	defer srv.Close()
	inner := &recordSource{}
	stop := make(chan struct{})
	f, err := newFilesSource(inner, newBlobClient(func() string { return srv.URL }, func() string { return "cred" }, srv.Client(), t.TempDir(), 1<<20),
		t.TempDir(), nil, stop, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	task := api.Task{ID: "k-1", Attempt: 1, TaskSpec: api.TaskSpec{Argv: []string{"true"}, Outputs: []string{"out.bin"}}}
	if err := f.stage(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(task.Workdir, "out.bin"), []byte("12345"), 0o644)
	f.Report(api.TaskReport{TaskID: "k-1", Attempt: 1, Outcome: api.OutcomeSucceeded})
	f.drain()
	if len(inner.reports) != 1 {
		t.Fatalf("reports = %+v, want one", inner.reports)
	}
	r := inner.reports[0]
	if r.Outcome != api.OutcomeFailed || !strings.Contains(r.Reason, "out.bin") || !strings.Contains(r.Reason, "blob-max-size") {
		t.Errorf("report = %+v; want a failed attempt naming out.bin and the cap", r)
	}
	if entries, _ := os.ReadDir(f.root); len(entries) != 0 {
		t.Errorf("sandbox left behind: %v", entries)
	}
}
