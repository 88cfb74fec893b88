package artifact_test

import (
	"archive/tar"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/artifact"
	"github.com/nodemgr/nodemgr/internal/node/artifact/artifacttest"
)

type at = artifacttest.Entry

var noWaits = []time.Duration{0, 0, 0}

// setup starts a depot for group "com.example" and a store over a fresh
// prefix that fetches from it.
func setup(t *testing.T, opts artifact.Options) (*artifact.Store, *artifacttest.Depot, string) {
	t.Helper()
	depot := artifacttest.NewDepot(t)
	prefix := filepath.Join(t.TempDir(), "prefix")
	t.Cleanup(func() { makeWritable(prefix) })
	if opts.RetryWaits == nil {
		opts.RetryWaits = noWaits
	}
	s, err := artifact.New(prefix, map[string]string{"com.example": depot.URL() + "/"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, depot, prefix
}

// makeWritable lets the test's TempDir cleanup delete installed trees,
// which are read-only (to all but root).
func makeWritable(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}

func mustID(t *testing.T, s string) artifact.ID {
	t.Helper()
	id, err := artifact.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// tree lists every path under root (relative, slash separated), sorted.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

// assertClean checks that a failed install left nothing under prefix but
// the empty store directories.
func assertClean(t *testing.T, prefix string) {
	t.Helper()
	if diff := cmp.Diff([]string{"software", "software/.tmp"}, tree(t, prefix)); diff != "" {
		t.Errorf("prefix after a failed install (-want +got):\n%s", diff)
	}
}

var sample = []at{
	{Name: "bin/", Mode: fs.ModeDir | 0o755},
	{Name: "bin/search", Body: "#!/bin/sh\necho search\n", Mode: 0o755},
	{Name: "conf/search.yaml", Body: "port: 8080\n"},
	{Name: "README", Body: "search service\n"},
}

func TestInstallListRemove(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ext   string
		build func(testing.TB, ...at) []byte
	}{
		{"zip", ".zip", artifacttest.Zip},
		{"tar.gz", ".tar.gz", artifacttest.TarGz},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, depot, prefix := setup(t, artifact.Options{})
			id := mustID(t, "com.example:search:1.4.2")
			archive := tc.build(t, sample...)
			p := depot.Publish(id, tc.ext, archive)

			before := time.Now().UTC()
			inst, err := s.Install(context.Background(), id)
			if err != nil {
				t.Fatalf("Install(%s) = %v", id, err)
			}
			wantPath := filepath.Join(prefix, "software", "com.example", "search", "1.4.2")
			sum := sha256.Sum256(archive)
			want := artifact.Installed{
				ID:       id,
				Path:     wantPath,
				Source:   depot.URL() + "/" + p,
				Checksum: "sha256:" + hex.EncodeToString(sum[:]),
				Size:     int64(len(sample[1].Body) + len(sample[2].Body) + len(sample[3].Body)),
				Files:    4, // entries; conf/ is implied by conf/search.yaml
			}
			if diff := cmp.Diff(want, inst, cmpIgnoreTime); diff != "" {
				t.Errorf("Install(%s) (-want +got):\n%s", id, diff)
			}
			if inst.InstalledAt.Before(before.Add(-time.Second)) || inst.InstalledAt.After(time.Now().Add(time.Second)) {
				t.Errorf("InstalledAt = %v, want about now", inst.InstalledAt)
			}
			if got := s.Path(id); got != wantPath {
				t.Errorf("Path(%s) = %q, want %q", id, got, wantPath)
			}
			b, err := os.ReadFile(filepath.Join(wantPath, "conf", "search.yaml"))
			if err != nil || string(b) != "port: 8080\n" {
				t.Errorf("conf/search.yaml = %q, %v", b, err)
			}

			list, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]artifact.Installed{inst}, list); diff != "" {
				t.Errorf("List() (-want +got):\n%s", diff)
			}

			if err := s.Remove(id); err != nil {
				t.Fatalf("Remove(%s) = %v", id, err)
			}
			if _, err := os.Stat(wantPath); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after Remove, Stat(%s) = %v, want not exist", wantPath, err)
			}
			if list, err := s.List(); err != nil || len(list) != 0 {
				t.Errorf("List() after Remove = %v, %v; want none", list, err)
			}
			assertClean(t, prefix)
			if err := s.Remove(id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("second Remove(%s) = %v, want ErrNotFound", id, err)
			}
		})
	}
}

var cmpIgnoreTime = cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "InstalledAt" }, cmp.Ignore())

func TestInstallTwiceIsNoop(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	id := mustID(t, "com.example:search:2.0")
	p := depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
	first, err := s.Install(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	// A changed depot must not matter: the installed version stays as is.
	depot.Put(p, []byte("garbage"))
	second, err := s.Install(context.Background(), id)
	if err != nil {
		t.Fatalf("second Install(%s) = %v", id, err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("second Install(%s) differs (-first +second):\n%s", id, diff)
	}
	if n := depot.Gets(p); n != 1 {
		t.Errorf("archive fetched %d times, want 1", n)
	}
}

func TestListSeveral(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	var want []string
	for _, v := range []string{"com.example:search:1.0", "com.example:index:3.1", "com.example:search:1.1"} {
		id := mustID(t, v)
		depot.Publish(id, ".zip", artifacttest.Zip(t, at{Name: "f", Body: v}))
		if _, err := s.Install(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	slices.Sort(want)
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, inst := range list {
		got = append(got, inst.ID.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List() ids (-want +got):\n%s", diff)
	}
	// Removing one version keeps its siblings and their directories.
	if err := s.Remove(mustID(t, "com.example:search:1.0")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path(mustID(t, "com.example:search:1.1"))); err != nil {
		t.Errorf("sibling version gone after Remove: %v", err)
	}
}

func TestChecksums(t *testing.T) {
	archive := artifacttest.Zip(t, sample...)
	sha := sha256.Sum256(archive)
	md := md5.Sum(archive)
	wrongSHA := sha256.Sum256([]byte("something else"))
	wrongMD5 := md5.Sum([]byte("something else"))
	tests := []struct {
		name    string
		files   map[string]string // extension → contents
		wantSum string            // "" means the install must fail
		wantErr error
	}{
		{"sha256", map[string]string{".sha256": hex.EncodeToString(sha[:])}, "sha256:" + hex.EncodeToString(sha[:]), nil},
		{"sha256sum format", map[string]string{".sha256": hex.EncodeToString(sha[:]) + "  search-1.0.zip\n"}, "sha256:" + hex.EncodeToString(sha[:]), nil},
		{"upper case hex", map[string]string{".sha256": strings.ToUpper(hex.EncodeToString(sha[:]))}, "sha256:" + hex.EncodeToString(sha[:]), nil},
		{"md5 for old depots", map[string]string{".md5": hex.EncodeToString(md[:]) + " *search-1.0.zip"}, "md5:" + hex.EncodeToString(md[:]), nil},
		{"sha256 preferred over md5", map[string]string{".sha256": hex.EncodeToString(sha[:]), ".md5": hex.EncodeToString(wrongMD5[:])}, "sha256:" + hex.EncodeToString(sha[:]), nil},
		{"sha256 mismatch", map[string]string{".sha256": hex.EncodeToString(wrongSHA[:])}, "", errdefs.ErrInvalid},
		{"md5 mismatch", map[string]string{".md5": hex.EncodeToString(wrongMD5[:])}, "", errdefs.ErrInvalid},
		{"no checksum", map[string]string{}, "", errdefs.ErrInvalid},
		{"malformed checksum", map[string]string{".sha256": "not hex"}, "", errdefs.ErrInvalid},
		{"md5-length digest in a sha256 file", map[string]string{".sha256": hex.EncodeToString(md[:])}, "", errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, depot, prefix := setup(t, artifact.Options{})
			id := mustID(t, "com.example:search:1.0")
			p := artifacttest.ArchivePath(id, ".zip")
			depot.Put(p, archive)
			for ext, body := range tc.files {
				depot.Put(p+ext, []byte(body))
			}
			inst, err := s.Install(context.Background(), id)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Install(%s) = %v, want %v", id, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), id.String()) {
					t.Errorf("error %q does not name %s", err, id)
				}
				assertClean(t, prefix)
				return
			}
			if err != nil {
				t.Fatalf("Install(%s) = %v", id, err)
			}
			if inst.Checksum != tc.wantSum {
				t.Errorf("Checksum = %q, want %q", inst.Checksum, tc.wantSum)
			}
		})
	}
}

func TestHostileArchives(t *testing.T) {
	outside := t.TempDir() // absolute names and links aim here
	big := strings.Repeat("x", 4096)
	zeros := string(make([]byte, 8<<20))
	tests := []struct {
		name    string
		ext     string
		archive func(t *testing.T) []byte
		opts    artifact.Options
		want    string // in the error
	}{
		{"zip slip", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: "ok", Body: "fine"}, at{Name: "../evil", Body: "x"})
		}, artifact.Options{}, `"../evil"`},
		{"zip slip deep", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: "a/b/../../../../evil", Body: "x"})
		}, artifact.Options{}, `leads out`},
		{"tar slip", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "ok", Body: "fine"}, at{Name: "../evil", Body: "x"})
		}, artifact.Options{}, `"../evil"`},
		{"zip absolute path", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: filepath.Join(outside, "evil"), Body: "x"})
		}, artifact.Options{}, "absolute path"},
		{"tar absolute path", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: filepath.Join(outside, "evil"), Body: "x"})
		}, artifact.Options{}, "absolute path"},
		{"zip backslash name", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: `..\evil`, Body: "x"})
		}, artifact.Options{}, "backslash"},
		{"zip symlink out", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: "lib/link", Link: "../../outside"})
		}, artifact.Options{}, "leads out"},
		{"tar symlink absolute", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "link", Link: outside})
		}, artifact.Options{}, "absolute target"},
		{"tar write through symlink", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "sub/", Mode: fs.ModeDir | 0o755}, at{Name: "link", Link: "sub"}, at{Name: "link/evil", Body: "x"})
		}, artifact.Options{}, "is a symlink"},
		{"tar symlink chain climbing out", ".tar.gz", func(t *testing.T) []byte {
			// d1/d2/a -> ../../x stays inside, but "d1/d2/a/../../.." from the
			// root follows a and then climbs out, though it cleans to ".".
			return artifacttest.TarGz(t, at{Name: "d1/d2/a", Link: "../../x"}, at{Name: "s", Link: "d1/d2/a/../../.."})
		}, artifact.Options{}, `after a name`},
		{"tar hardlink out", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "passwd", Link: "../../../../etc/passwd", Hard: true})
		}, artifact.Options{}, "hard link"},
		{"tar hardlink absolute", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "passwd", Link: "/etc/passwd", Hard: true})
		}, artifact.Options{}, "hard link"},
		{"tar hardlink to a missing entry", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "h", Link: "nothere", Hard: true})
		}, artifact.Options{}, "not a file unpacked before"},
		{"tar device file", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "dev", Type: tar.TypeChar})
		}, artifact.Options{}, "unsupported"},
		{"duplicate entry", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "f", Body: "a"}, at{Name: "f", Link: "elsewhere"})
		}, artifact.Options{}, "given twice"},
		{"manifest name", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: ".nodemgr-artifact.json", Body: "{}"})
		}, artifact.Options{}, "reserved"},
		{"zip too many files", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: "1"}, at{Name: "2"}, at{Name: "3"}, at{Name: "4"})
		}, artifact.Options{MaxFiles: 3}, "limit of 3 entries"},
		{"tar too many files", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "1"}, at{Name: "2"}, at{Name: "3"}, at{Name: "4"})
		}, artifact.Options{MaxFiles: 3}, "limit of 3 entries"},
		{"zip too large", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: "big", Body: big})
		}, artifact.Options{MaxBytes: 1024}, "1024-byte limit"},
		{"tar too large", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "small", Body: "x"}, at{Name: "big", Body: big})
		}, artifact.Options{MaxBytes: 1024}, "1024-byte limit"},
		{"zip bomb", ".zip", func(t *testing.T) []byte {
			return artifacttest.Zip(t, at{Name: "zeros", Body: zeros})
		}, artifact.Options{MaxBytes: 1 << 20}, "limit"},
		{"zip bomb with lying size header", ".zip", func(t *testing.T) []byte {
			return artifacttest.ZipLyingSize(t, "zeros", []byte(zeros), 10)
		}, artifact.Options{MaxBytes: 1 << 20}, `"zeros"`},
		{"zip inflating past its declared size under the cap", ".zip", func(t *testing.T) []byte {
			return artifacttest.ZipLyingSize(t, "zeros", []byte(zeros[:3<<20]), 1<<19)
		}, artifact.Options{MaxBytes: 1 << 20}, `"zeros"`},
		{"tar lying size header", ".tar.gz", func(t *testing.T) []byte {
			return artifacttest.TarGz(t, at{Name: "a", Body: big, Size: 10})
		}, artifact.Options{}, "not a valid tar.gz"},
		{"not an archive", ".zip", func(t *testing.T) []byte {
			return []byte("this is not a zip file")
		}, artifact.Options{}, "not a valid zip"},
		{"truncated tar.gz", ".tar.gz", func(t *testing.T) []byte {
			b := artifacttest.TarGz(t, at{Name: "a", Body: big}, at{Name: "b", Body: big})
			return b[:len(b)/2]
		}, artifact.Options{}, "unpack"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, depot, prefix := setup(t, tc.opts)
			id := mustID(t, "com.example:evil:1.0")
			depot.Publish(id, tc.ext, tc.archive(t))
			_, err := s.Install(context.Background(), id)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Install(%s) = %v, want ErrInvalid", id, err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), id.String()) {
				t.Errorf("Install(%s) = %q, want it to name %s and say %q", id, err, id, tc.want)
			}
			assertClean(t, prefix)
			if got := tree(t, outside); len(got) != 0 {
				t.Errorf("files written outside the prefix: %v", got)
			}
			if got := tree(t, filepath.Dir(prefix)); !slices.Equal(got[:1], []string{"prefix"}) || len(got) != 3 {
				t.Errorf("files beside the prefix: %v", got)
			}
		})
	}
}

// Links that stay inside the tree are fine: software ships them.
func TestInnerLinks(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	id := mustID(t, "com.example:lib:1.0")
	depot.Publish(id, ".tar.gz", artifacttest.TarGz(t,
		at{Name: "./lib/libfoo.so.1", Body: "elf"},
		at{Name: "./lib/libfoo.so", Link: "libfoo.so.1"},
		at{Name: "./bin/foo", Link: "../lib/libfoo.so.1"},
		at{Name: "./lib/hard", Link: "./lib/libfoo.so.1", Hard: true},
		at{Name: "./top", Link: "."},
	))
	inst, err := s.Install(context.Background(), id)
	if err != nil {
		t.Fatalf("Install(%s) = %v", id, err)
	}
	for _, name := range []string{"lib/libfoo.so", "bin/foo", "lib/hard"} {
		b, err := os.ReadFile(filepath.Join(inst.Path, name))
		if err != nil || string(b) != "elf" {
			t.Errorf("ReadFile(%s) = %q, %v; want \"elf\"", name, b, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(inst.Path, "bin/foo")); err != nil || target != "../lib/libfoo.so.1" {
		t.Errorf("Readlink(bin/foo) = %q, %v", target, err)
	}
}

func TestDownloadOverCap(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"declared too large", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000000")
			_, _ = w.Write(make([]byte, 1000000))
		}},
		{"chunked stream past the cap", func(w http.ResponseWriter, r *http.Request) {
			// No Content-Length: the store must count for itself.
			chunk := make([]byte, 8<<10)
			for range 4 * limit / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, depot, prefix := setup(t, artifact.Options{MaxBytes: limit})
			id := mustID(t, "com.example:huge:1.0")
			p := artifacttest.ArchivePath(id, ".zip")
			depot.Handle(p, tc.handler)
			depot.Put(p+".sha256", []byte(strings.Repeat("0", 64)))
			_, err := s.Install(context.Background(), id)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "limit") {
				t.Fatalf("Install(%s) = %v, want ErrInvalid over the limit", id, err)
			}
			if n := depot.Gets(p); n != 1 {
				t.Errorf("archive fetched %d times, want 1 (an oversized archive is not retried)", n)
			}
			assertClean(t, prefix)
		})
	}
}

func TestBadIDs(t *testing.T) {
	s, _, prefix := setup(t, artifact.Options{})
	for _, tc := range []struct {
		name    string
		id      artifact.ID
		wantErr error
		want    string
	}{
		{"unknown artifact", artifact.ID{Group: "com.example", Artifact: "nosuch", Version: "1.0"}, errdefs.ErrNotFound, "com.example:nosuch:1.0"},
		{"group without depot", artifact.ID{Group: "org.other", Artifact: "x", Version: "1"}, errdefs.ErrNotFound, `no depot is configured for group "org.other"`},
		{"dotdot version", artifact.ID{Group: "com.example", Artifact: "x", Version: ".."}, errdefs.ErrInvalid, `version ".."`},
		{"slash artifact", artifact.ID{Group: "com.example", Artifact: "a/b", Version: "1"}, errdefs.ErrInvalid, `artifact "a/b"`},
		{"empty group", artifact.ID{Artifact: "x", Version: "1"}, errdefs.ErrInvalid, `group "" is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Install(context.Background(), tc.id)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Install(%+v) = %v, want %v naming %q", tc.id, err, tc.wantErr, tc.want)
			}
			assertClean(t, prefix)
		})
	}
	// The 404 message names both file names tried.
	_, err := s.Install(context.Background(), artifact.ID{Group: "com.example", Artifact: "nosuch", Version: "1.0"})
	for _, name := range []string{"nosuch-1.0.zip", "nosuch-1.0.tar.gz"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("404 error %v does not name %s", err, name)
		}
	}
	if s.Path(artifact.ID{Group: "..", Artifact: "x", Version: "1"}) != "" {
		t.Errorf("Path of an invalid id is not empty")
	}
	if err := s.Remove(artifact.ID{Group: "com.example", Artifact: "..", Version: "1"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Remove(invalid id) = %v, want ErrInvalid", err)
	}
}

func TestRetries(t *testing.T) {
	t.Run("transient 500s then success", func(t *testing.T) {
		s, depot, _ := setup(t, artifact.Options{RetryWaits: noWaits})
		id := mustID(t, "com.example:flaky:1.0")
		p := depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
		depot.FailNext(p, 2)
		depot.FailNext(p+".sha256", 1)
		if _, err := s.Install(context.Background(), id); err != nil {
			t.Fatalf("Install(%s) = %v", id, err)
		}
		if n := depot.Gets(p); n != 3 {
			t.Errorf("archive fetched %d times, want 3", n)
		}
	})
	t.Run("connection dropped mid-body then success", func(t *testing.T) {
		s, depot, _ := setup(t, artifact.Options{})
		id := mustID(t, "com.example:cut:1.0")
		archive := artifacttest.Zip(t, sample...)
		p := depot.Publish(id, ".zip", archive)
		var mu sync.Mutex
		calls := 0
		depot.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			w.Header().Set("Content-Length", strconv.Itoa(len(archive)))
			if first {
				_, _ = w.Write(archive[:len(archive)/2])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // drop the connection
			}
			_, _ = w.Write(archive)
		}))
		inst, err := s.Install(context.Background(), id)
		if err != nil {
			t.Fatalf("Install(%s) = %v", id, err)
		}
		if n := depot.Gets(p); n != 2 {
			t.Errorf("archive fetched %d times, want 2", n)
		}
		if b, err := os.ReadFile(filepath.Join(inst.Path, "README")); err != nil || string(b) != "search service\n" {
			t.Errorf("README = %q, %v", b, err)
		}
	})
	t.Run("500s outlast the tries", func(t *testing.T) {
		s, depot, prefix := setup(t, artifact.Options{RetryWaits: noWaits})
		id := mustID(t, "com.example:down:1.0")
		p := depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
		depot.FailNext(p, 3)
		_, err := s.Install(context.Background(), id)
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("Install(%s) = %v, want ErrUnavailable", id, err)
		}
		if n := depot.Gets(p); n != 3 {
			t.Errorf("archive fetched %d times, want 3", n)
		}
		assertClean(t, prefix)
	})
	t.Run("waits are honoured", func(t *testing.T) {
		waits := []time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond}
		s, depot, _ := setup(t, artifact.Options{RetryWaits: waits})
		id := mustID(t, "com.example:slow:1.0")
		p := depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
		depot.FailNext(p, 2)
		start := time.Now()
		if _, err := s.Install(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 60*time.Millisecond {
			t.Errorf("install with two retries took %v, want at least the 60ms of waits", took)
		}
	})
	t.Run("cancelled during a wait", func(t *testing.T) {
		s, depot, prefix := setup(t, artifact.Options{RetryWaits: []time.Duration{0, time.Hour}})
		id := mustID(t, "com.example:cancel:1.0")
		p := depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
		depot.FailNext(p, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := s.Install(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Install(%s) = %v, want deadline exceeded", id, err)
		}
		assertClean(t, prefix)
	})
}

func TestRemoveInUse(t *testing.T) {
	var mu sync.Mutex
	busy := true
	s, depot, _ := setup(t, artifact.Options{UsedBy: func(artifact.ID) []string {
		mu.Lock()
		defer mu.Unlock()
		if busy {
			return []string{"1.svc.ops.prod"}
		}
		return nil
	}})
	id := mustID(t, "com.example:svc:1.0")
	depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
	inst, err := s.Install(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(id); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), "1.svc.ops.prod") {
		t.Fatalf("Remove(%s) while in use = %v, want ErrConflict naming it and its user", id, err)
	}
	if _, err := os.Stat(filepath.Join(inst.Path, "README")); err != nil {
		t.Errorf("refused Remove touched the tree: %v", err)
	}
	mu.Lock()
	busy = false
	mu.Unlock()
	if err := s.Remove(id); err != nil {
		t.Fatalf("Remove(%s) once idle = %v", id, err)
	}
}

// ForceRemove removes an artifact in use and names the services it breaks.
func TestForceRemoveInUse(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{UsedBy: func(artifact.ID) []string { return []string{"1.svc.ops.prod"} }})
	id := mustID(t, "com.example:svc:1.0")
	depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
	inst, err := s.Install(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	broken, err := s.ForceRemove(id)
	if err != nil || !slices.Equal(broken, []string{"1.svc.ops.prod"}) {
		t.Fatalf("ForceRemove(%s) = %q, %v; want it removed, breaking 1.svc.ops.prod", id, broken, err)
	}
	if _, err := os.Stat(inst.Path); !os.IsNotExist(err) {
		t.Errorf("ForceRemove left the tree: %v", err)
	}
}

func TestConcurrentInstallsDownloadOnce(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	id := mustID(t, "com.example:popular:1.0")
	archive := artifacttest.Zip(t, sample...)
	p := depot.Publish(id, ".zip", archive)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	depot.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		_, _ = w.Write(archive)
	}))

	const n = 8
	results := make([]artifact.Installed, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = s.Install(context.Background(), id) })
	}
	<-started
	time.Sleep(20 * time.Millisecond) // let the others queue on the id's lock
	close(release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Install #%d = %v", i, errs[i])
		}
		if diff := cmp.Diff(results[0], results[i]); diff != "" {
			t.Errorf("Install #%d differs (-#0 +#%d):\n%s", i, i, diff)
		}
	}
	if got := depot.Gets(p); got != 1 {
		t.Errorf("archive fetched %d times, want 1", got)
	}
}

func TestConcurrentDistinctVersions(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	var ids []artifact.ID
	for _, v := range []string{"1", "2", "3", "4"} {
		id := mustID(t, "com.example:multi:"+v)
		depot.Publish(id, ".zip", artifacttest.Zip(t, at{Name: "v", Body: v}))
		ids = append(ids, id)
	}
	if _, err := s.Install(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, id := range ids[1:] {
		wg.Go(func() {
			if _, err := s.Install(context.Background(), id); err != nil {
				t.Errorf("Install(%s) = %v", id, err)
			}
		})
	}
	// Removing the only installed version races with installs of its
	// siblings into the same artifact directory.
	wg.Go(func() {
		if err := s.Remove(ids[0]); err != nil {
			t.Errorf("Remove(%s) = %v", ids[0], err)
		}
	})
	wg.Wait()
	list, err := s.List()
	if err != nil || len(list) != 3 {
		t.Errorf("List() = %v, %v; want the 3 other versions", list, err)
	}
}

func TestInstalledTreeIsReadOnly(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	id := mustID(t, "com.example:ro:1.0")
	depot.Publish(id, ".tar.gz", artifacttest.TarGz(t, slices.Concat(sample, []at{{Name: "bin/link", Link: "search"}})...))
	inst, err := s.Install(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{
		".":                      fs.ModeDir | 0o555,
		"bin":                    fs.ModeDir | 0o555,
		"bin/search":             0o555,
		"bin/link":               fs.ModeSymlink,
		"conf":                   fs.ModeDir | 0o555,
		"conf/search.yaml":       0o444,
		"README":                 0o444,
		".nodemgr-artifact.json": 0o444,
	}
	got := map[string]fs.FileMode{}
	err = filepath.WalkDir(inst.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(inst.Path, p)
		mode := fi.Mode()
		if mode&fs.ModeSymlink != 0 {
			mode = fs.ModeSymlink // link permissions mean nothing on Linux
		}
		got[filepath.ToSlash(rel)] = mode
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("modes under %s (-want +got):\n%s", inst.Path, diff)
	}
}

func TestNewClearsInterruptedInstalls(t *testing.T) {
	prefix := t.TempDir()
	stale := filepath.Join(prefix, "software", ".tmp", "install-123", "tree", "ro")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(stale), 0o555); err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.New(prefix, nil, artifact.Options{}); err != nil {
		t.Fatalf("New = %v", err)
	}
	assertClean(t, prefix)
}

func TestNewValidatesDepots(t *testing.T) {
	for _, tc := range []struct {
		name   string
		depots map[string]string
	}{
		{"bad group", map[string]string{"../x": "http://depot"}},
		{"not a URL", map[string]string{"g": "::"}},
		{"not http", map[string]string{"g": "file:///srv/depot"}},
		{"no host", map[string]string{"g": "http:///sw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := artifact.New(t.TempDir(), tc.depots, artifact.Options{}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("New(%v) = %v, want ErrInvalid", tc.depots, err)
			}
		})
	}
}

// A directory the store did not make is neither listed nor overwritten.
func TestForeignDirectory(t *testing.T) {
	s, depot, _ := setup(t, artifact.Options{})
	id := mustID(t, "com.example:manual:1.0")
	depot.Publish(id, ".zip", artifacttest.Zip(t, sample...))
	if err := os.MkdirAll(filepath.Join(s.Path(id), "stuff"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Install(context.Background(), id); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Install over a foreign dir = %v, want ErrConflict", err)
	}
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Errorf("List() = %v, %v; want none", list, err)
	}
	if _, err := os.Stat(filepath.Join(s.Path(id), "stuff")); err != nil {
		t.Errorf("foreign dir touched: %v", err)
	}
}
