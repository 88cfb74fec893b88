package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRoundTripTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	os.MkdirAll(filepath.Join(src, "sub"), 0o750)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o640)
	os.Symlink("run.sh", filepath.Join(src, "link"))

	var buf bytes.Buffer
	if err := Write(context.Background(), &buf, src, "tree"); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := Extract(context.Background(), &buf, dst); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"run.sh": 0o755, "sub": 0o750 | os.ModeDir, "sub/data": 0o640} {
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, mode)
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "run.sh" {
		t.Errorf("link = %q, %v; want run.sh", target, err)
	}
}

func TestExtractRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []tar.Header
	}{
		{"dot dot", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"absolute", []tar.Header{{Name: "/tmp/evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"inner dot dot", []tar.Header{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"two tops", []tar.Header{{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}, {Name: "b", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"hard link out", []tar.Header{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/pw", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range tc.entries {
				h := h
				tw.WriteHeader(&h)
			}
			tw.Close()
			outside := t.TempDir()
			dst := filepath.Join(outside, "dst")
			_, err := Extract(context.Background(), &buf, dst)
			if err == nil || !errors.Is(err, ErrBad) {
				t.Errorf("Extract(%s) = %v, want ErrBad", tc.name, err)
			}
			if _, err := os.Stat(filepath.Join(outside, "evil")); err == nil {
				t.Errorf("%s wrote outside the destination", tc.name)
			}
		})
	}
}

// A copy keeps its source's time to the second and is never newer: the
// tar writer on its own would round 0.7 s up to the next second.
func TestModTimeKeptToTheSecondNeverLater(t *testing.T) {
	src := filepath.Join(t.TempDir(), "f")
	os.WriteFile(src, []byte("x"), 0o644)
	when := time.Date(2026, 1, 2, 3, 4, 5, 700_000_000, time.UTC)
	os.Chtimes(src, when, when)
	var buf bytes.Buffer
	if err := Write(context.Background(), &buf, src, "f"); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := Extract(context.Background(), &buf, dst); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	if want := when.Truncate(time.Second); err != nil || !fi.ModTime().Equal(want) {
		t.Errorf("copied mtime = %v, %v; want %v", fi.ModTime(), err, want)
	}
}
