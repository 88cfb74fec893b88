package artifact

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// FuzzParseID: an id either is refused as invalid or names exactly three
// plain path elements and prints back to what was parsed.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"com.example:search:1.4.2", "g:a:v", "a_b:c+d:1.0-rc.1", "..:a:v", "g:a:.v",
		"g/x:a:v", `g\x:a:v`, "g:a", "g:a:v:w", "::", "g:a:" + strings.Repeat("v", 129), "g:a:v\x00", "ġ:a:v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("ParseID(%q) = %v, want an errdefs.ErrInvalid", s, err)
			}
			return
		}
		if id.String() != s {
			t.Fatalf("ParseID(%q).String() = %q", s, id.String())
		}
		var again ID
		if err := again.UnmarshalText([]byte(s)); err != nil || again != id {
			t.Fatalf("UnmarshalText(%q) = %+v, %v, want %+v", s, again, err, id)
		}
		// The parts become <prefix>/software/<group>/<artifact>/<version>.
		const software = "/prefix/software"
		dir := filepath.Join(software, id.Group, id.Artifact, id.Version)
		rel, err := filepath.Rel(software, dir)
		if err != nil || !filepath.IsLocal(rel) || strings.Count(rel, string(filepath.Separator)) != 2 || strings.HasPrefix(filepath.Base(dir), ".") {
			t.Fatalf("ParseID(%q) gives install dir %q: not three plain names below %s", s, dir, software)
		}
	})
}

// FuzzParseChecksum: a checksum file yields a digest of the algorithm's
// size, the one its first word spells, or an invalid-input error.
func FuzzParseChecksum(f *testing.F) {
	for _, s := range []string{
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  search-1.4.2.zip\n",
		"098f6bcd4621d373cade4e832627b4f6\n", "098F6BCD4621D373CADE4E832627B4F6 *x.zip",
		"", " \n", "zz", "098f6bcd4621d373cade4e832627b4f", "098f6bcd4621d373cade4e832627b4f6\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int{32, 16} { // sha256, md5
			sum, err := parseChecksum(data, size)
			if err != nil {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("parseChecksum(%q, %d) = %v, want an errdefs.ErrInvalid", data, size, err)
				}
				continue
			}
			first := strings.Fields(string(data))[0]
			if len(sum) != size || hex.EncodeToString(sum) != strings.ToLower(first) {
				t.Fatalf("parseChecksum(%q, %d) = %x, want the %d bytes %s", data, size, sum, size, first)
			}
		}
	})
}

// fuzzEntry is one entry of a seed archive.
type fuzzEntry struct {
	name, body, link string
	mode             fs.FileMode
	hard             bool
}

var fuzzSeeds = [][]fuzzEntry{
	{{name: "bin/", mode: fs.ModeDir | 0o755}, {name: "bin/server", body: "#!/bin/sh\n", mode: 0o755}, {name: "conf/app.yaml", body: "a: 1\n", mode: 0o644}, {name: "bin/s", link: "server", mode: fs.ModeSymlink | 0o777}},
	{{name: "lib/libx.so.1", body: "elf", mode: 0o644}, {name: "lib/libx.so", link: "libx.so.1", mode: fs.ModeSymlink | 0o777}, {name: "lib/sub/up", link: "../libx.so", mode: fs.ModeSymlink | 0o777}},
	{{name: "a", body: "x", mode: 0o644}, {name: "b", link: "a", hard: true}},
	{{name: "../evil", body: "x", mode: 0o644}},
	{{name: "/abs/evil", body: "x", mode: 0o644}},
	{{name: "link", link: "..", mode: fs.ModeSymlink | 0o777}, {name: "link/evil", body: "x", mode: 0o644}},
	{{name: "d1/d2/a", link: "../../x", mode: fs.ModeSymlink | 0o777}, {name: "s", link: "d1/d2/a/../../..", mode: fs.ModeSymlink | 0o777}},
	{{name: "pw", link: "../../../../etc/passwd", hard: true}},
	{{name: "a", body: "1", mode: 0o644}, {name: "a", body: "2", mode: 0o644}},
	{{name: `..\evil`, body: "x", mode: 0o644}},
	{{name: manifestName, body: "{}", mode: 0o644}},
}

// fuzzZip and fuzzTarGz build seed archives. Tests of this package cannot
// use artifacttest, which imports it.
func fuzzZip(f *testing.F, entries []fuzzEntry) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if e.hard {
			continue // zip has no hard links
		}
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			f.Fatal(err)
		}
		body := e.body
		if e.link != "" {
			body = e.link
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

func fuzzTarGz(f *testing.F, entries []fuzzEntry) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: int64(e.mode.Perm()), Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.hard:
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, e.link, 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		case e.mode.IsDir():
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	gz.Close()
	return buf.Bytes()
}

// FuzzExtractZip and FuzzExtractTarGz unpack arbitrary archives. Whatever
// the archive, nothing may appear outside the install dir, and what is
// unpacked must be read-only, within the caps, with every symlink leading
// to a place inside the tree; a refusal is an invalid-input error.
func FuzzExtractZip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(fuzzZip(f, s))
	}
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Add([]byte("not a zip"))
	f.Fuzz(func(t *testing.T, data []byte) { checkExtract(t, ".zip", data) })
}

func FuzzExtractTarGz(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(fuzzTarGz(f, s))
	}
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"))
	f.Add([]byte("not a tar.gz"))
	f.Fuzz(func(t *testing.T, data []byte) { checkExtract(t, ".tar.gz", data) })
}

const (
	fuzzMaxBytes = 1 << 20
	fuzzMaxFiles = 64
)

func checkExtract(t *testing.T, format string, data []byte) {
	base := t.TempDir()
	dst := filepath.Join(base, "out")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{dst, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(base, "in"+format)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer unlockTree(dst)

	st, err := extract(archive{path: in, format: format, url: "https://depot.example/g/a/v/a" + format}, dst, fuzzMaxBytes, fuzzMaxFiles)
	t.Logf("extract = %+v, %v", st, err)
	if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("extract = %v, want nil or an errdefs.ErrInvalid", err)
	}
	checkNothingOutside(t, base, dst)
	if err != nil {
		return
	}
	if st.size > fuzzMaxBytes || st.files > fuzzMaxFiles {
		t.Fatalf("extract unpacked %d bytes in %d entries, over the caps %d, %d", st.size, st.files, fuzzMaxBytes, fuzzMaxFiles)
	}
	checkTree(t, dst)
}

// checkNothingOutside fails unless base holds only the archive, the
// untouched outside/keep and what lies below dst.
func checkNothingOutside(t *testing.T, base, dst string) {
	t.Helper()
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		switch {
		case rel == "." || rel == "outside" || rel == "out" || strings.HasPrefix(rel, "in."):
		case strings.HasPrefix(rel, "out"+string(filepath.Separator)):
		case rel == filepath.Join("outside", "keep"):
			if b, err := os.ReadFile(p); err != nil || string(b) != "keep" || d.Type() != 0 {
				t.Errorf("outside/keep was changed")
			}
		default:
			t.Errorf("extract wrote %s, outside the install dir", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkTree fails unless everything below dst is read-only and every
// symlink leads inside dst.
func checkTree(t *testing.T, dst string) {
	t.Helper()
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dst {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			checkLink(t, dst, p)
		case fi.Mode().Perm()&0o222 != 0:
			t.Errorf("%s is writable (%v) after extract", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkLink(t *testing.T, dst, link string) {
	t.Helper()
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	inside := func(p string) bool {
		rel, err := filepath.Rel(dst, p)
		return err == nil && (rel == "." || filepath.IsLocal(rel))
	}
	if filepath.IsAbs(target) || !inside(filepath.Join(filepath.Dir(link), target)) {
		t.Errorf("symlink %s -> %s leads out of the install dir", link, target)
	}
	if real, err := filepath.EvalSymlinks(link); err == nil && !inside(real) {
		t.Errorf("symlink %s resolves to %s, outside the install dir", link, real)
	}
}

// unlockTree lets the TempDir cleanup delete an unpacked tree, which is
// read-only.
func unlockTree(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}
