package orchestrate

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The artifact of a real nodemgr build is smaller than the build, runs
// once decompressed, and its digest is that of what it decompresses to.
func TestArtifactRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nodemgr")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodemgr")
	build := exec.Command("go", "build", "-o", bin, "github.com/nodemgr/nodemgr/cmd/nodemgr")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := BootstrapConfig{Binaries: []string{bin}, StageDir: dir}
	a, err := cfg.Artifact("x86_64")
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(bin)
	if a.Size*3 > fi.Size() {
		t.Errorf("artifact is %d bytes for a %d-byte binary; want under a third", a.Size, fi.Size())
	}
	f, err := os.Open(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "unpacked")
	w, _ := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), zr); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got := hex.EncodeToString(h.Sum(nil)); got != a.SHA256 {
		t.Errorf("digest %s, want %s", got, a.SHA256)
	}
	ufi, _ := os.Stat(out)
	if ufi.Size() >= fi.Size() {
		t.Errorf("decompressed %d bytes, the build %d: nothing was stripped", ufi.Size(), fi.Size())
	}
	v, err := exec.Command(out, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "nodemgr version") {
		t.Errorf("the stripped binary does not run: %v: %s", err, v)
	}
	if b, err := os.ReadFile(a.Stripped); err != nil || hex.EncodeToString(sha256Of(b)) != a.SHA256 {
		t.Errorf("the stripped binary beside the artifact (%v) is not what it decompresses to", err)
	}
	again, err := cfg.Artifact("x86_64")
	if err != nil || again != a {
		t.Errorf("second Artifact = %+v, %v; want the cached %+v", again, err, a)
	}
	// A restarted server finds it in its stage directory.
	before, _ := os.Stat(a.Path)
	artifactCache.Lock()
	clear(artifactCache.m)
	artifactCache.Unlock()
	again, err = cfg.Artifact("x86_64")
	after, _ := os.Stat(a.Path)
	if err != nil || again != a || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("after a restart Artifact = %+v, %v (made again: %v); want the one on disk %+v", again, err, !after.ModTime().Equal(before.ModTime()), a)
	}
}

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
