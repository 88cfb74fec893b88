package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzExtract unpacks arbitrary tar streams, as the file copy endpoints
// and the executors do with what a client or a container sends. Whatever
// the stream, nothing may land outside the copy's target: not by name,
// not through a link the stream made, not by a hard link to a file
// outside.
func FuzzExtract(f *testing.F) {
	f.Add(fuzzTreeSeed(f))
	for _, hs := range [][]tar.Header{
		{{Name: "top", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}},
		{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/link", Typeflag: tar.TypeSymlink, Linkname: "../outside"}, {Name: "top/link/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/abs", Typeflag: tar.TypeSymlink, Linkname: "/"}, {Name: "top/abs/tmp/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/a", Typeflag: tar.TypeReg, Mode: 0o644}, {Name: "top/h", Typeflag: tar.TypeLink, Linkname: "top/a"}},
		{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/pw", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}},
		{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "/tmp/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}, {Name: "b", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o4777}, {Name: "top/fifo", Typeflag: tar.TypeFifo, Mode: 0o644}},
	} {
		f.Add(fuzzTar(f, hs))
	}
	f.Add([]byte{})
	f.Add([]byte("not a tar stream"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		base := t.TempDir()
		work := filepath.Join(base, "work")
		outside := filepath.Join(base, "outside")
		for _, d := range []string{work, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(work, "copy")
		got, err := Extract(context.Background(), bytes.NewReader(stream), target)
		defer unlockTree(base)
		if err == nil && got != target {
			t.Errorf("Extract(%s) wrote %s", target, got)
		}
		err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(base, p)
			switch {
			case rel == "." || rel == "work" || rel == "outside":
			case rel == filepath.Join("work", "copy") || strings.HasPrefix(rel, filepath.Join("work", "copy")+string(filepath.Separator)):
			case rel == filepath.Join("outside", "keep"):
				if b, err := os.ReadFile(p); err != nil || string(b) != "keep" || d.Type() != 0 {
					t.Errorf("outside/keep was changed")
				}
			default:
				t.Errorf("Extract wrote %s, outside its target", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzTreeSeed is what Write makes of a small real tree.
func fuzzTreeSeed(f *testing.F) []byte {
	src := filepath.Join(f.TempDir(), "top")
	for _, d := range []string{src, filepath.Join(src, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "file"), []byte("hello\n"), 0o640); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("sub/file", filepath.Join(src, "link")); err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(context.Background(), &buf, src, "top"); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

func fuzzTar(f *testing.F, hs []tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if err := tw.WriteHeader(&h); err != nil {
			f.Fatal(err)
		}
		tw.Write(make([]byte, h.Size))
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// unlockTree lets the TempDir cleanup delete a tree that was unpacked with
// read-only directories.
func unlockTree(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}
