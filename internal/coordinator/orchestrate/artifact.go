package orchestrate

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// An Artifact is an agent binary as machines receive it: cut to what the
// kernel loads (the symbol table and debug info only a debugger reads are
// left out, as sstrip does), gzip-compressed, with the digest of what it
// decompresses to. A 98 MB build goes as about 20 MB.
type Artifact struct {
	Arch   string // as uname -m says it
	Path   string // the gzip file
	Size   int64  // of the gzip file
	SHA256 string // hex, of the decompressed binary
	// Stripped is the decompressed binary, for a copy that costs less
	// than unpacking it would (to a container on this host).
	Stripped string
}

// artifactCache holds the artifacts made in this process, by source file
// and its size and modification time: a binary replaced in
// --agent-binaries is made again.
var artifactCache = struct {
	sync.Mutex
	m map[string]Artifact
}{m: map[string]Artifact{}}

// Artifacts are the artifacts of every binary the server can deliver,
// made on first use and kept in the stage directory.
func (c BootstrapConfig) Artifacts() ([]Artifact, error) {
	bins, err := c.candidates()
	if err != nil {
		return nil, err
	}
	out := make([]Artifact, 0, len(bins))
	seen := map[string]bool{}
	for _, b := range bins {
		if seen[b.Arch] {
			continue // chooseBinary takes the first of an arch
		}
		seen[b.Arch] = true
		a, err := c.artifact(b)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Artifact is the artifact for a machine of arch (uname -m's name).
func (c BootstrapConfig) Artifact(arch string) (Artifact, error) {
	bins, err := c.candidates()
	if err != nil {
		return Artifact{}, err
	}
	b, err := chooseBinary(bins, arch)
	if err != nil {
		return Artifact{}, err
	}
	return c.artifact(b)
}

func (c BootstrapConfig) artifact(b Binary) (Artifact, error) {
	fi, err := os.Stat(b.Path)
	if err != nil {
		return Artifact{}, fmt.Errorf("agent binary: %w", err)
	}
	abs, _ := filepath.Abs(b.Path)
	key := fmt.Sprintf("%s\x00%d\x00%d", abs, fi.Size(), fi.ModTime().UnixNano())
	artifactCache.Lock()
	defer artifactCache.Unlock()
	if a, ok := artifactCache.m[key]; ok {
		if _, err := os.Stat(a.Path); err == nil {
			return a, nil
		}
	}
	dir := filepath.Join(stageRoot(c.StageDir), "nodemgr-agent-artifacts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Artifact{}, fmt.Errorf("agent artifacts: %w", err)
	}
	sum := sha256.Sum256([]byte(key))
	path := filepath.Join(dir, hex.EncodeToString(sum[:8])+"-"+b.Arch+".gz")
	a, err := readArtifact(b, path)
	if err != nil {
		a, err = makeArtifact(b, path)
	}
	if err != nil {
		return Artifact{}, fmt.Errorf("prepare agent binary %s for delivery: %w", b.Path, err)
	}
	artifactCache.m[key] = a
	removeOlder(dir, path, b.Arch)
	return a, nil
}

// removeOlder removes the artifacts of earlier builds for arch: one binary
// serves an arch, and a developer who rebuilds would otherwise collect
// about 90 MB a build in the data dir.
func removeOlder(dir, keep, arch string) {
	old, _ := filepath.Glob(filepath.Join(dir, "*-"+arch+"*"))
	for _, f := range old {
		if !strings.HasPrefix(f, strippedPath(keep)) {
			os.Remove(f)
		}
	}
}

// readArtifact finds an artifact an earlier run of the server made (the
// stage directory is the data dir): its files and its digest, written
// last.
func readArtifact(b Binary, path string) (Artifact, error) {
	digest, err := os.ReadFile(path + ".sha256")
	if err != nil {
		return Artifact{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Artifact{}, err
	}
	if _, err := os.Stat(strippedPath(path)); err != nil {
		return Artifact{}, err
	}
	return Artifact{Arch: b.Arch, Path: path, Size: fi.Size(), SHA256: string(digest), Stripped: strippedPath(path)}, nil
}

func strippedPath(gz string) string { return strings.TrimSuffix(gz, ".gz") }

// Prepare makes the artifacts of every binary the server can deliver
// ahead of the first launch, which would otherwise wait for them.
func (c BootstrapConfig) Prepare() error {
	_, err := c.Artifacts()
	return err
}

func stageRoot(dir string) string {
	if dir == "" {
		return os.TempDir()
	}
	return dir
}

// makeArtifact writes b's artifact to path, the stripped binary beside
// it, and their digest last.
func makeArtifact(b Binary, path string) (Artifact, error) {
	in, err := os.Open(b.Path)
	if err != nil {
		return Artifact{}, err
	}
	defer in.Close()
	head, end, err := strippedHead(in)
	if err != nil {
		return Artifact{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".artifact-")
	if err != nil {
		return Artifact{}, err
	}
	defer os.Remove(tmp.Name())
	raw, err := os.CreateTemp(filepath.Dir(path), ".stripped-")
	if err != nil {
		return Artifact{}, err
	}
	defer os.Remove(raw.Name())
	defer raw.Close()
	rawBuf := bufio.NewWriterSize(raw, 1<<20)
	digest := sha256.New()
	buf := bufio.NewWriterSize(tmp, 1<<20)
	zw, _ := gzip.NewWriterLevel(buf, gzip.BestSpeed)
	w := io.MultiWriter(zw, digest, rawBuf)
	if _, err := w.Write(head); err != nil {
		return Artifact{}, err
	}
	if _, err := io.Copy(w, io.NewSectionReader(in, int64(len(head)), end-int64(len(head)))); err != nil {
		return Artifact{}, err
	}
	if err := zw.Close(); err != nil {
		return Artifact{}, err
	}
	if err := buf.Flush(); err != nil {
		return Artifact{}, err
	}
	if err := rawBuf.Flush(); err != nil {
		return Artifact{}, err
	}
	if err := raw.Chmod(0o755); err != nil {
		return Artifact{}, err
	}
	if err := raw.Close(); err != nil {
		return Artifact{}, err
	}
	if err := os.Rename(raw.Name(), strippedPath(path)); err != nil {
		return Artifact{}, err
	}
	fi, err := tmp.Stat()
	if err != nil {
		return Artifact{}, err
	}
	if err := tmp.Close(); err != nil {
		return Artifact{}, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return Artifact{}, err
	}
	sum := hex.EncodeToString(digest.Sum(nil))
	if err := os.WriteFile(path+".sha256", []byte(sum), 0o600); err != nil {
		return Artifact{}, err
	}
	return Artifact{Arch: b.Arch, Path: path, Size: fi.Size(), SHA256: sum, Stripped: strippedPath(path)}, nil
}

// strippedHead reads an ELF executable's header and says where what the
// kernel loads ends: the bytes after it (symbols, debug info) are dropped,
// and the header returned no longer names section headers, which would
// point into them (Go writes its section header table near the start of
// the file, inside the first segment, where it stays, unnamed).
func strippedHead(f *os.File) (head []byte, end int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, 0, fmt.Errorf("not an ELF executable: %w", err)
	}
	for _, p := range ef.Progs {
		end = max(end, int64(p.Off+p.Filesz))
	}
	// Header fields: e_shoff, and e_shentsize, e_shnum, e_shstrndx.
	shoff, shoffLen, shfields, size := 0x28, 8, 0x3a, 0x40
	if ef.Class == elf.ELFCLASS32 {
		shoff, shoffLen, shfields, size = 0x20, 4, 0x2e, 0x34
	}
	head = make([]byte, size)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, 0, err
	}
	if end < int64(size) || end >= fi.Size() {
		return head, fi.Size(), nil // nothing after the segments, or no segments to trust
	}
	clear(head[shoff : shoff+shoffLen])
	clear(head[shfields : shfields+6])
	return head, end, nil
}
