package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// staleTemp is how old a temporary file must be before Walk takes it for
// a crashed Put's leftover. A live Put writes its file as bytes arrive,
// so only one stalled this long loses it.
const staleTemp = time.Hour

// Dir is a Store in a local directory:
//
//	<path>/sha256/ab/ab12...   a blob, named by its digest's hex (mode 0600)
//	<path>/tmp/                Puts in progress
//
// The two-hex-digit fan-out keeps directories small. A Put writes a
// temporary file, syncs it and renames it into place, so a blob file is
// always whole, and Puts of the same content race harmlessly: the last
// rename leaves the same bytes.
type Dir struct{ root string }

// NewDir returns the store in path, creating its directories (mode
// 0700) if they do not exist.
func NewDir(path string) (*Dir, error) {
	for _, sub := range []string{algorithm, "tmp"} {
		if err := os.MkdirAll(filepath.Join(path, sub), 0o700); err != nil {
			return nil, fmt.Errorf("blob store %s: %w", path, errdefs.FromOS(err))
		}
	}
	return &Dir{root: path}, nil
}

func (s *Dir) path(d Digest) string {
	h := d.Hex()
	return filepath.Join(s.root, algorithm, h[:2], h)
}

func (s *Dir) tempDir() string { return filepath.Join(s.root, "tmp") }

// Put stores r's content; see Store.
func (s *Dir) Put(ctx context.Context, r io.Reader, want Digest, maxSize int64) (Info, error) {
	info, err := s.put(ctx, r, want, maxSize)
	if err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	return info, nil
}

func (s *Dir) put(ctx context.Context, r io.Reader, want Digest, maxSize int64) (Info, error) {
	if !want.IsZero() {
		// Stored already: hash the stream without writing it, only to
		// hold the caller to want.
		if info, err := s.touch(want); err == nil {
			if _, err := copyHashed(ctx, io.Discard, r, want, maxSize); err != nil {
				return Info{}, err
			}
			return info, nil
		}
	}
	tmp, err := os.CreateTemp(s.tempDir(), "put-*") // mode 0600
	if err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	defer os.Remove(tmp.Name()) // fails once renamed, as it should
	defer tmp.Close()
	info, err := copyHashed(ctx, tmp, r, want, maxSize)
	if err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	if stored, err := s.touch(info.Digest); err == nil {
		return stored, nil
	}
	return s.commit(tmp, info.Digest)
}

// commit syncs tmp and renames it to d's path.
func (s *Dir) commit(tmp *os.File, d Digest) (Info, error) {
	if err := tmp.Sync(); err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	dst := s.path(d)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	return s.stat(d)
}

// touch marks a stored blob as stored now, so Collect keeps it.
func (s *Dir) touch(d Digest) (Info, error) {
	now := time.Now()
	if err := os.Chtimes(s.path(d), now, now); err != nil {
		return Info{}, err
	}
	return s.stat(d)
}

func (s *Dir) stat(d Digest) (Info, error) {
	fi, err := os.Stat(s.path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, errdefs.NotFound("blob %s", d)
	}
	if err != nil {
		return Info{}, errdefs.FromOS(err)
	}
	return Info{Digest: d, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Stat describes a blob; see Store.
func (s *Dir) Stat(ctx context.Context, d Digest) (Info, error) {
	if err := checkDigest(d); err != nil {
		return Info{}, fmt.Errorf("stat blob: %w", err)
	}
	info, err := s.stat(d)
	if err != nil {
		return Info{}, fmt.Errorf("stat blob: %w", err)
	}
	return info, nil
}

// Open returns a blob's content, an *os.File (so a caller can seek it,
// for HTTP ranges); see Store.
func (s *Dir) Open(ctx context.Context, d Digest) (io.ReadCloser, Info, error) {
	if err := checkDigest(d); err != nil {
		return nil, Info{}, fmt.Errorf("open blob: %w", err)
	}
	f, err := os.Open(s.path(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, fmt.Errorf("open blob: %w", errdefs.NotFound("blob %s", d))
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("open blob %s: %w", d, errdefs.FromOS(err))
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Info{}, fmt.Errorf("open blob %s: %w", d, errdefs.FromOS(err))
	}
	return f, Info{Digest: d, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Delete removes a blob; see Store.
func (s *Dir) Delete(ctx context.Context, d Digest) error {
	if err := checkDigest(d); err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	if err := os.Remove(s.path(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %s: %w", d, errdefs.FromOS(err))
	}
	return nil
}

// Walk calls fn for every blob; see Store. It first removes the
// temporary files of Puts a crash cut short (older than an hour), and
// skips files that are not blobs.
func (s *Dir) Walk(ctx context.Context, fn func(Info) error) error {
	if err := s.removeStaleTemps(); err != nil {
		return fmt.Errorf("walk blobs: %w", err)
	}
	fans, err := os.ReadDir(filepath.Join(s.root, algorithm))
	if err != nil {
		return fmt.Errorf("walk blobs: %w", errdefs.FromOS(err))
	}
	for _, fan := range fans {
		if !fan.IsDir() || len(fan.Name()) != 2 {
			continue
		}
		if err := s.walkFan(ctx, fan.Name(), fn); err != nil {
			return err
		}
	}
	return nil
}

// walkFan walks one fan-out directory, sha256/<fan>.
func (s *Dir) walkFan(ctx context.Context, fan string, fn func(Info) error) error {
	entries, err := os.ReadDir(filepath.Join(s.root, algorithm, fan))
	if err != nil {
		return fmt.Errorf("walk blobs: %w", errdefs.FromOS(err))
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("walk blobs: %w", err)
		}
		d, err := ParseDigest(algorithm + ":" + e.Name())
		if err != nil || d.Hex()[:2] != fan || !e.Type().IsRegular() {
			continue // not a blob of ours
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing
		}
		if err != nil {
			return fmt.Errorf("walk blobs: %w", errdefs.FromOS(err))
		}
		if err := fn(Info{Digest: d, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

// removeStaleTemps deletes the temporary files of Puts that a crash cut
// short.
func (s *Dir) removeStaleTemps() error {
	entries, err := os.ReadDir(s.tempDir())
	if err != nil {
		return errdefs.FromOS(err)
	}
	cutoff := time.Now().Add(-staleTemp)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue // not a Put's
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue // gone already, or a Put still at work
		}
		if err := os.Remove(filepath.Join(s.tempDir(), e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errdefs.FromOS(err)
		}
	}
	return nil
}

var _ Store = (*Dir)(nil)
