package sftp

import (
	"context"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// TestCopyFromKeepsEntriesInside serves a tree whose listing names
// entries that would land outside the copy, which no real file system
// can hold, from an in-memory SFTP server: each lands inside the copy,
// under its last element (the client keeps no more of a listed name), or
// the copy is refused; nothing is written outside it.
func TestCopyFromKeepsEntriesInside(t *testing.T) {
	for _, name := range []string{"../evil", "a/../../evil", "/tmp/evil", "../../../../../../../tmp/evil"} {
		t.Run(name, func(t *testing.T) {
			sc := fakeServer(t, name)
			dir := t.TempDir()
			target := filepath.Join(dir, "in", "copy")
			if err := get(context.Background(), sc, "/tree", target); err != nil {
				t.Fatalf("get(tree listing %q) = %v", name, err)
			}
			if b, err := os.ReadFile(filepath.Join(target, "evil")); err != nil || string(b) != "evil" {
				t.Errorf("copy/evil = %q, %v; want evil", b, err)
			}
			for _, p := range []string{filepath.Join(dir, "evil"), filepath.Join(dir, "in", "evil"), "/tmp/evil"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("the copy wrote %s, outside its target", p)
				}
			}
		})
	}
}

// fakeServer is a client of an in-memory SFTP server whose /tree is a
// directory listing one file named name.
func fakeServer(t *testing.T, name string) *sftp.Client {
	t.Helper()
	c1, c2 := net.Pipe()
	h := sftp.InMemHandler()
	h.FileList = lister{name}
	h.FileGet = reader{}
	srv := sftp.NewRequestServer(c1, h)
	go srv.Serve()
	sc, err := sftp.NewClientPipe(c2, c2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close(); srv.Close() })
	return sc
}

type lister struct{ name string }

func (l lister) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch {
	case r.Method == "List":
		return listerAt{info{l.name, 0o644, false}}, nil
	case r.Filepath == "/tree":
		return listerAt{info{"tree", 0o755 | os.ModeDir, true}}, nil
	}
	return listerAt{info{path.Base(r.Filepath), 0o644, false}}, nil
}

// reader serves "evil" as every file.
type reader struct{}

func (reader) Fileread(*sftp.Request) (io.ReaderAt, error) { return strings.NewReader("evil"), nil }

type listerAt []os.FileInfo

func (l listerAt) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if n+int(off) == len(l) {
		return n, io.EOF
	}
	return n, nil
}

type info struct {
	name string
	mode os.FileMode
	dir  bool
}

func (i info) Name() string { return i.name }
func (i info) Size() int64 {
	if i.dir {
		return 0
	}
	return 4
}
func (i info) Mode() os.FileMode  { return i.mode }
func (i info) ModTime() time.Time { return time.Unix(1700000000, 0) }
func (i info) IsDir() bool        { return i.dir }
func (i info) Sys() any           { return nil }
