package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// copyTree copies the file or tree src to dst (see the package doc).
func copyTree(ctx context.Context, src, dst string) error {
	target := archive.Target(dst, filepath.Base(src))
	fi, err := os.Lstat(src)
	if err != nil {
		return classify(err)
	}
	// Only a copy on one host can land inside its own source.
	if fi.IsDir() {
		if inside, err := within(src, target); err != nil {
			return classify(err)
		} else if inside {
			return fmt.Errorf("%s is inside %s: %w", target, src, errdefs.ErrInvalid)
		}
	}
	return classify(archive.Copy(ctx, src, target))
}

// within reports whether target is src or lies beneath it, links
// resolved as far as they exist.
func within(src, target string) (bool, error) {
	s, err := filepath.EvalSymlinks(src)
	if err != nil {
		return false, err
	}
	s, err = filepath.Abs(s)
	if err != nil {
		return false, err
	}
	t, err := filepath.Abs(target)
	if err != nil {
		return false, err
	}
	// Resolve the longest existing prefix of target.
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(t); err == nil {
			t = filepath.Join(r, rest)
			break
		}
		parent := filepath.Dir(t)
		if parent == t {
			break
		}
		rest = filepath.Join(filepath.Base(t), rest)
		t = parent
	}
	rel, err := filepath.Rel(s, t)
	if err != nil {
		return false, nil
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))), nil
}
