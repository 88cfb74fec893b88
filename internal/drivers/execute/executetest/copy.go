package executetest

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// MTime is the modification time of the files Tree makes.
var MTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// Tree makes the suite's sample tree at dir/name and returns its path:
// files and directories of assorted modes, files dated MTime, an empty
// directory, and relative, absolute and dangling symbolic links.
func Tree(t *testing.T, dir, name string) string {
	t.Helper()
	root := filepath.Join(dir, name)
	for _, f := range []struct {
		name string
		mode fs.FileMode
		body string
	}{
		{"run.sh", 0o755, "#!/bin/sh\necho run\n"},
		{"secret", 0o600, "s3cret"},
		{"sub/data.txt", 0o640, "data\n"},
		{"sub/deeper/empty", 0o644, ""},
	} {
		p := filepath.Join(root, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, MTime, MTime); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []struct {
		name string
		mode fs.FileMode
	}{{".", 0o755}, {"sub", 0o750}, {"sub/deeper", 0o755}, {"emptydir", 0o700}} {
		p := filepath.Join(root, d.name)
		if err := os.MkdirAll(p, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, to := range map[string]string{"rel-link": "sub/data.txt", "abs-link": "/etc/hostname", "dangling": "missing"} {
		if err := os.Symlink(to, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Entry describes one file, directory or link of a listing.
type Entry struct {
	Mode  string // type (d, f, l) and permission bits in octal: "d750"
	MTime int64  // modification time of a file, in Unix seconds
	Body  string // content of a file
	Link  string // target of a link
}

// Listing describes the local file or tree at root, by path relative to
// root ("." for root itself).
func Listing(t testing.TB, root string) map[string]Entry {
	t.Helper()
	out := map[string]Entry{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		m := fi.Mode()
		bits := uint32(m.Perm())
		for _, b := range []struct {
			mode fs.FileMode
			bit  uint32
		}{{fs.ModeSetuid, 0o4000}, {fs.ModeSetgid, 0o2000}, {fs.ModeSticky, 0o1000}} {
			if m&b.mode != 0 {
				bits |= b.bit
			}
		}
		e := Entry{Mode: "?" + strconv.FormatUint(uint64(bits), 8)}
		switch {
		case m.IsDir():
			e.Mode = "d" + e.Mode[1:]
		case m&fs.ModeSymlink != 0:
			e.Mode = "l" + e.Mode[1:]
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case m.IsRegular():
			e.Mode = "f" + e.Mode[1:]
			e.MTime = fi.ModTime().Unix()
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Body = string(b)
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// listScript lists the tree at $1: a line a path, "TYPE MODE OWNER
// MTIME<tab>PATH<tab>LINK".
const listScript = `find "$1" | while IFS= read -r p; do
	if [ -L "$p" ]; then t=l; elif [ -d "$p" ]; then t=d; elif [ -f "$p" ]; then t=f; else t=?; fi
	printf '%s %s\t%s\t%s\n' "$t" "$(stat -c '%a %U %Y' "$p")" "$p" "$(readlink "$p")"
done`

// targetListing describes the file or tree at root on the target, as
// Listing does a local one, and also returns who owns each path.
func targetListing(t *testing.T, tg Target, root string) (map[string]Entry, map[string]string) {
	t.Helper()
	out, owners := map[string]Entry{}, map[string]string{}
	list := mustRun(t, tg, "sh", "-c", listScript, "sh", root)
	for line := range strings.Lines(list) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		meta := strings.Fields(f[0])
		if len(f) != 3 || len(meta) != 4 {
			t.Fatalf("listing %s on the target: bad line %q", root, line)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(f[1], root), "/")
		if rel == "" {
			rel = "."
		}
		e := Entry{Mode: meta[0] + meta[1]}
		switch meta[0] {
		case "l":
			e.Link = f[2]
		case "f":
			e.MTime, _ = strconv.ParseInt(meta[3], 10, 64)
			e.Body = mustRun(t, tg, "cat", f[1])
		}
		out[rel], owners[rel] = e, meta[2]
	}
	if len(out) == 0 {
		t.Fatalf("listing %s on the target: nothing there", root)
	}
	return out, owners
}

// checkTarget compares the tree at root on the target with want, and
// checks that the target's user owns all of it.
func checkTarget(t *testing.T, tg Target, root string, want map[string]Entry, what string) {
	t.Helper()
	got, owners := targetListing(t, tg, root)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s on the target (-want +got):\n%s", what, diff)
	}
	for p, o := range owners {
		if o != tg.User {
			t.Errorf("%s on the target: %s belongs to %s, want %s", what, p, o, tg.User)
		}
	}
}

func testCopyTo(t *testing.T, tg Target) {
	e, d, ctx := tg.Executor, tg.Deployment, ctxFor(t)
	src := Tree(t, t.TempDir(), "tree")
	want := Listing(t, src)
	dir := tempDir(t, tg)

	// A tree, to an exact path with missing parents.
	dst := path.Join(dir, "a", "b", "copy")
	if err := e.CopyTo(ctx, d, src, dst); err != nil {
		t.Fatalf("CopyTo(%s, %s) = %v", src, dst, err)
	}
	checkTarget(t, tg, dst, want, "copied tree")
	if out := mustRun(t, tg, path.Join(dst, "run.sh")); out != "run\n" {
		t.Errorf("copied script says %q, want run", out)
	}
	// The target's user may write in what was copied.
	mustRun(t, tg, "touch", path.Join(dst, "sub", "new"))
	mustRun(t, tg, "rm", path.Join(dst, "sub", "new"))
	// Again, onto itself: merged, same result.
	if err := e.CopyTo(ctx, d, src, dst); err != nil {
		t.Fatalf("CopyTo(%s, %s) again = %v", src, dst, err)
	}
	checkTarget(t, tg, dst, want, "tree copied twice")
	// A file, into a directory.
	if err := e.CopyTo(ctx, d, filepath.Join(src, "sub", "data.txt"), dir+"/"); err != nil {
		t.Fatalf("CopyTo(data.txt, %s/) = %v", dir, err)
	}
	checkTarget(t, tg, path.Join(dir, "data.txt"), map[string]Entry{".": want["sub/data.txt"]}, "copied file")
	// A link stays a link.
	if err := e.CopyTo(ctx, d, filepath.Join(src, "abs-link"), path.Join(dir, "l")); err != nil {
		t.Fatalf("CopyTo(abs-link) = %v", err)
	}
	if l := mustRun(t, tg, "readlink", path.Join(dir, "l")); l != "/etc/hostname\n" {
		t.Errorf("copied link -> %q, want /etc/hostname", l)
	}
}

func testCopyFrom(t *testing.T, tg Target) {
	e, d, ctx := tg.Executor, tg.Deployment, ctxFor(t)
	src := Tree(t, t.TempDir(), "tree")
	want := Listing(t, src)
	remote := path.Join(tempDir(t, tg), "tree")
	if err := e.CopyTo(ctx, d, src, remote); err != nil {
		t.Fatalf("CopyTo(%s, %s) = %v", src, remote, err)
	}
	out := t.TempDir()

	// A tree, to an exact path with missing parents.
	dst := filepath.Join(out, "a", "b", "copy")
	if err := e.CopyFrom(ctx, d, remote, dst); err != nil {
		t.Fatalf("CopyFrom(%s, %s) = %v", remote, dst, err)
	}
	if diff := cmp.Diff(want, Listing(t, dst)); diff != "" {
		t.Errorf("copied tree (-want +got):\n%s", diff)
	}
	// Again, onto itself: merged, same result.
	if err := e.CopyFrom(ctx, d, remote, dst); err != nil {
		t.Fatalf("CopyFrom(%s, %s) again = %v", remote, dst, err)
	}
	if diff := cmp.Diff(want, Listing(t, dst)); diff != "" {
		t.Errorf("tree copied twice (-want +got):\n%s", diff)
	}
	// A tree, into a directory.
	if err := e.CopyFrom(ctx, d, remote, out+"/"); err != nil {
		t.Fatalf("CopyFrom(%s, %s/) = %v", remote, out, err)
	}
	if diff := cmp.Diff(want, Listing(t, filepath.Join(out, "tree"))); diff != "" {
		t.Errorf("tree copied into a directory (-want +got):\n%s", diff)
	}
	// A file, into a directory.
	if err := e.CopyFrom(ctx, d, path.Join(remote, "sub", "data.txt"), out+"/"); err != nil {
		t.Fatalf("CopyFrom(data.txt, %s/) = %v", out, err)
	}
	if got := Listing(t, filepath.Join(out, "data.txt"))["."]; got != want["sub/data.txt"] {
		t.Errorf("copied file = %+v, want %+v", got, want["sub/data.txt"])
	}
	// A link stays a link.
	if err := e.CopyFrom(ctx, d, path.Join(remote, "abs-link"), filepath.Join(out, "l")); err != nil {
		t.Fatalf("CopyFrom(abs-link) = %v", err)
	}
	if l, err := os.Readlink(filepath.Join(out, "l")); err != nil || l != "/etc/hostname" {
		t.Errorf("copied link -> %q, %v; want /etc/hostname", l, err)
	}
}

// testCopyFile copies one file to assorted places on the target and back.
func testCopyFile(t *testing.T, tg Target) {
	e, d, ctx := tg.Executor, tg.Deployment, ctxFor(t)
	src := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(src, []byte("binary"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, MTime, MTime); err != nil {
		t.Fatal(err)
	}
	dir := tempDir(t, tg)
	mustRun(t, tg, "sh", "-c", `mkdir -p "$1/real" && ln -s "$1/real" "$1/via-link"`, "sh", dir)

	tests := []struct {
		name, dst, at string // at: where it must land on the target
	}{
		{"exact path", "opt/nodemgr/bin/agent-1", "opt/nodemgr/bin/agent-1"},
		{"into a dir", "opt/nodemgr/", "opt/nodemgr/agent"},
		{"replace a file", "opt/nodemgr/bin/agent-1", "opt/nodemgr/bin/agent-1"},
		{"through a link dir", "via-link/x", "via-link/x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Keep a trailing "/": it means "into".
			dst, at := dir+"/"+tc.dst, path.Join(dir, tc.at)
			if err := e.CopyTo(ctx, d, src, dst); err != nil {
				t.Fatalf("CopyTo(%s) = %v", dst, err)
			}
			got := mustRun(t, tg, "stat", "-L", "-c", "%a %s %Y", at)
			if want := fmt.Sprintf("750 6 %d\n", MTime.Unix()); got != want {
				t.Errorf("stat %s = %q, want %q", at, got, want)
			}
			local := filepath.Join(t.TempDir(), "deep", "copy")
			if err := e.CopyFrom(ctx, d, at, local); err != nil {
				t.Fatalf("CopyFrom(%s) = %v", at, err)
			}
			fi, err := os.Stat(local)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(local)
			if fi.Mode() != 0o750 || string(b) != "binary" || !fi.ModTime().Equal(MTime) {
				t.Errorf("copied back: %v %q %v, want -rwxr-x--- \"binary\" %v", fi.Mode(), b, fi.ModTime(), MTime)
			}
		})
	}
}

// testCopyErrors checks the copies that must fail, and that failing
// changes neither side.
func testCopyErrors(t *testing.T, tg Target) {
	e, d, ctx := tg.Executor, tg.Deployment, ctxFor(t)
	src := Tree(t, t.TempDir(), "tree")
	want := Listing(t, src)
	dir := tempDir(t, tg)
	remote := path.Join(dir, "tree")
	if err := e.CopyTo(ctx, d, src, remote); err != nil {
		t.Fatalf("CopyTo(%s, %s) = %v", src, remote, err)
	}
	remoteWant, _ := targetListing(t, tg, remote)

	CheckFailing(t, []Failing{
		{"missing local src", func() error { return e.CopyTo(ctx, d, filepath.Join(src, "nope"), path.Join(dir, "x")) }, errdefs.ErrNotFound},
		{"missing target src", func() error { return e.CopyFrom(ctx, d, path.Join(dir, "nope"), filepath.Join(t.TempDir(), "x")) }, errdefs.ErrNotFound},
		{"file onto a dir", func() error { return e.CopyTo(ctx, d, filepath.Join(src, "secret"), path.Join(remote, "sub")) }, errdefs.ErrConflict},
		{"tree onto a local file", func() error { return e.CopyFrom(ctx, d, path.Join(remote, "sub"), filepath.Join(src, "run.sh")) }, errdefs.ErrConflict},
	})
	if diff := cmp.Diff(want, Listing(t, src)); diff != "" {
		t.Errorf("failed copies changed the local tree (-want +got):\n%s", diff)
	}
	checkTarget(t, tg, remote, remoteWant, "tree after failed copies")
}
