package dockerexec

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

type entry struct {
	name, link string
	typ        byte
	body       string
}

func tarball(t *testing.T, entries []entry) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

// TestExtractRefusesEscapes feeds extract archives that a hostile
// container could send, and checks that nothing lands outside dst.
func TestExtractRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		safe    bool // may succeed, by writing inside dst
	}{
		{"dot-dot", []entry{{name: "top/", typ: tar.TypeDir}, {name: "top/../../outside", typ: tar.TypeReg, body: "x"}}, false},
		{"dot-dot inside", []entry{{name: "top/", typ: tar.TypeDir}, {name: "top/a/../../outside", typ: tar.TypeReg, body: "x"}}, false},
		{"absolute", []entry{{name: "top/", typ: tar.TypeDir}, {name: "/outside", typ: tar.TypeReg, body: "x"}}, false},
		{"other top", []entry{{name: "top/", typ: tar.TypeDir}, {name: "other/outside", typ: tar.TypeReg, body: "x"}}, false},
		{"through an absolute link", []entry{{name: "top/", typ: tar.TypeDir}, {name: "top/l", link: "OUT", typ: tar.TypeSymlink}, {name: "top/l/outside", typ: tar.TypeReg, body: "x"}}, false},
		{"through a relative link", []entry{{name: "top/", typ: tar.TypeDir}, {name: "top/l", link: "..", typ: tar.TypeSymlink}, {name: "top/l/outside", typ: tar.TypeReg, body: "x"}}, false},
		{"through a link dir", []entry{{name: "top/", typ: tar.TypeDir}, {name: "top/l", link: "..", typ: tar.TypeSymlink}, {name: "top/l/", typ: tar.TypeDir}, {name: "top/l/outside", typ: tar.TypeReg, body: "x"}}, true},
		{"hard link out", []entry{{name: "top/", typ: tar.TypeDir}, {name: "top/h", link: "../outside", typ: tar.TypeLink}}, false},
		{"second entry after a file", []entry{{name: "top", typ: tar.TypeReg, body: "x"}, {name: "outside", typ: tar.TypeReg, body: "x"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "sub")
			os.MkdirAll(out, 0o755)
			for i := range tc.entries {
				if tc.entries[i].link == "OUT" {
					tc.entries[i].link = out
				}
			}
			dst := filepath.Join(dir, "dst")
			err := extract(context.Background(), tarball(t, tc.entries), dst)
			if err == nil && !tc.safe {
				t.Errorf("extract(%v) = nil, want it refused", tc.entries)
			}
			for _, p := range []string{filepath.Join(dir, "outside"), filepath.Join(out, "outside")} {
				if _, serr := os.Lstat(p); serr == nil {
					t.Errorf("extract(%v) wrote %s", tc.entries, p)
				}
			}
			if tc.safe {
				if _, err := os.Stat(filepath.Join(dst, "l", "outside")); err != nil {
					t.Errorf("extract(%v): the directory entry did not replace the link: %v", tc.entries, err)
				}
			}
			t.Logf("extract: %v", err)
		})
	}
}

func TestExtractKeepsLinks(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "dst")
	err := extract(context.Background(), tarball(t, []entry{
		{name: "top/", typ: tar.TypeDir},
		{name: "top/f", typ: tar.TypeReg, body: "hello"},
		{name: "top/abs", link: "/etc/passwd", typ: tar.TypeSymlink},
		{name: "top/rel", link: "f", typ: tar.TypeSymlink},
		{name: "top/hard", link: "top/f", typ: tar.TypeLink},
	}), dst)
	if err != nil {
		t.Fatalf("extract = %v", err)
	}
	for name, want := range map[string]string{"abs": "/etc/passwd", "rel": "f"} {
		if got, err := os.Readlink(filepath.Join(dst, name)); err != nil || got != want {
			t.Errorf("link %s -> %q, %v; want %q", name, got, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "hard")); err != nil || string(b) != "hello" {
		t.Errorf("hard link reads %q, %v", b, err)
	}
	if err := extract(context.Background(), tarball(t, nil), dst); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("extract(empty) = %v, want not found", err)
	}
}
