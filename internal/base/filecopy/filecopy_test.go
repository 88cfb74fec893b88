package filecopy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFile(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	os.WriteFile(src, []byte("new content"), 0o644)
	os.WriteFile(dst, []byte("an older, longer content"), 0o600)
	if err := File(src, dst, 0o755); err != nil {
		t.Fatalf("File: %v", err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "new content" {
		t.Errorf("dst holds %q, %v, want %q", b, err, "new content")
	}
	if err := File(filepath.Join(dir, "none"), dst, 0o644); !os.IsNotExist(err) {
		t.Errorf("File(missing) = %v, want a not-exist error", err)
	}
}

func TestInRoot(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "log"), []byte("line\n"), 0o644)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := InRoot(root, "log", "log.1", 0o644); err != nil {
		t.Fatalf("InRoot: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "log.1")); err != nil || string(b) != "line\n" {
		t.Errorf("log.1 holds %q, %v, want %q", b, err, "line\n")
	}
	if err := InRoot(root, "log", "../out", 0o644); err == nil {
		t.Error("InRoot(log, ../out) = nil, want an error: the copy would leave the root")
	}
	fi, err := os.Stat(filepath.Join(dir, "log.1"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("log.1: %v, %v, want mode 0644", fi, err)
	}
}
