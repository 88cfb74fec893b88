package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// prepareFiles puts a spec's Files into the runtime dir. A file already
// there is kept unless it is marked Overwrite, so what a service saved in
// its runtime dir survives a restart.
//
// Both dirs are opened as os.Root: a symlink in the artifact cannot make
// the copy read outside the tree, and one the service left in its runtime
// dir cannot make the agent write outside it.
func (s *Supervisor) prepareFiles(ctx context.Context, tree, runtimeDir string, files []api.ServiceFile) error {
	if len(files) == 0 {
		return nil
	}
	dst, err := os.OpenRoot(runtimeDir)
	if err != nil {
		return err
	}
	defer dst.Close()
	src, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer src.Close()
	for i, f := range files {
		field := fmt.Sprintf("files[%d]", i)
		if !f.Overwrite {
			_, err := dst.Lstat(f.Path)
			if err == nil {
				continue
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", field, err)
			}
		}
		if err := s.prepareFile(ctx, src, dst, field, f); err != nil {
			return err
		}
	}
	return nil
}

// prepareFile writes one file to a temp name beside it and renames it into
// place, so the service never sees half a file.
func (s *Supervisor) prepareFile(ctx context.Context, src, dst *os.Root, field string, f api.ServiceFile) error {
	mode := uint32(0o644)
	if f.Mode != "" {
		m, err := workload.ParseMode(f.Mode)
		if err != nil {
			return errdefs.Field(field+".mode", "%v", err)
		}
		mode = m
	}
	dir, base := filepath.Split(filepath.Clean(f.Path))
	if dir != "" {
		if err := dst.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.nodemgr-%d", base, rand.Uint64()))
	w, err := dst.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	defer dst.Remove(tmp) // no-op after the rename
	if f.From != "" {
		err = copyFrom(src, w, field, f.From)
	} else {
		err = s.download(ctx, w, field, f.URL)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := dst.Chmod(tmp, fs.FileMode(mode)); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if err := dst.Rename(tmp, f.Path); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

func copyFrom(src *os.Root, w io.Writer, field, from string) error {
	r, err := src.Open(from)
	if err != nil {
		return errdefs.Field(field+".from", "cannot read %q in the artifact's tree: %v", from, err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return fmt.Errorf("%s.from: %w", field, err)
	}
	if !st.Mode().IsRegular() {
		return errdefs.Field(field+".from", "%q is not a regular file; only files can be copied", from)
	}
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("%s.from: copy %s: %w", field, from, err)
	}
	return nil
}

// download fetches url into w, refusing more than MaxDownloadBytes. A
// client error (4xx) is the spec's fault; anything else may pass.
func (s *Supervisor) download(ctx context.Context, w io.Writer, field, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return errdefs.Field(field+".url", "%v", err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s.url: %w; try again later: %w", field, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return errdefs.Field(field+".url", "GET %s: %s", url, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s.url: GET %s: %s; try again later: %w", field, url, resp.Status, errdefs.ErrUnavailable)
	}
	limit := s.cfg.MaxDownloadBytes
	n, err := io.Copy(w, io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%s.url: GET %s: %w", field, url, err)
	}
	if n > limit {
		return errdefs.Field(field+".url", "GET %s: larger than the %d bytes a service file may be", url, limit)
	}
	return nil
}
