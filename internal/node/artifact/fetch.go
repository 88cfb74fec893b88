package artifact

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Archive formats, in the order they are looked for in a depot.
var formats = []string{".zip", ".tar.gz"}

// Checksum files beside an archive, in the order they are looked for.
var checksums = []struct {
	ext  string
	algo string
	new  func() hash.Hash
}{
	{".sha256", "sha256", sha256.New},
	{".md5", "md5", md5.New},
}

const maxChecksumFile = 4 << 10

// archive is a downloaded, verified archive.
type archive struct {
	path     string // local file
	format   string // ".zip" or ".tar.gz"
	url      string
	checksum string // "algo:hex", as verified
}

// errMissing marks a 404 from the depot; callers turn it into a clear
// ErrNotFound or try the next name.
var errMissing = errors.New("not in depot")

// transientError marks a failure worth another try: the network, a 5xx,
// a body cut short.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// download fetches id's archive into dir and verifies it against the
// depot's checksum.
func (s *Store) download(ctx context.Context, id ID, base, dir string) (archive, error) {
	dirURL := base + "/" + url.PathEscape(id.Group) + "/" + url.PathEscape(id.Artifact) + "/" + url.PathEscape(id.Version) + "/"
	var tried []string
	for _, format := range formats {
		name := id.Artifact + "-" + id.Version + format
		a := archive{path: filepath.Join(dir, "archive"+format), format: format, url: dirURL + url.PathEscape(name)}
		sums, err := s.fetchArchive(ctx, a.url, a.path)
		if errors.Is(err, errMissing) {
			tried = append(tried, name)
			continue
		}
		if err != nil {
			return archive{}, err
		}
		algo, want, err := s.fetchChecksum(ctx, a.url)
		if err != nil {
			return archive{}, err
		}
		got := sums[algo]
		if !bytes.Equal(got, want) {
			return archive{}, fmt.Errorf("checksum mismatch for %s: depot says %s %x, download has %x: %w",
				a.url, algo, want, got, errdefs.ErrInvalid)
		}
		a.checksum = algo + ":" + hex.EncodeToString(want)
		return a, nil
	}
	return archive{}, fmt.Errorf("not in depot %s (tried %s); check the id, or publish the archive there: %w", dirURL, strings.Join(tried, ", "), errdefs.ErrNotFound)
}

// fetchArchive downloads u into path, capped at MaxBytes, and returns its
// digests by algorithm.
func (s *Store) fetchArchive(ctx context.Context, u, path string) (map[string][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hashes := map[string]hash.Hash{}
	err = s.get(ctx, u, func(body io.Reader, length int64) error {
		if length > s.maxBytes {
			return fmt.Errorf("archive %s is %d bytes, over the %d-byte limit: %w", u, length, s.maxBytes, errdefs.ErrInvalid)
		}
		// Each try starts over.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if err := f.Truncate(0); err != nil {
			return err
		}
		w := []io.Writer{f}
		for _, c := range checksums {
			hashes[c.algo] = c.new()
			w = append(w, hashes[c.algo])
		}
		// Do not trust Content-Length: a chunked or lying body is cut off
		// at the cap all the same.
		n, err := io.Copy(io.MultiWriter(w...), io.LimitReader(body, s.maxBytes+1))
		if err != nil {
			return err
		}
		if n > s.maxBytes {
			return fmt.Errorf("archive %s is over the %d-byte limit: %w", u, s.maxBytes, errdefs.ErrInvalid)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	sums := map[string][]byte{}
	for algo, h := range hashes {
		sums[algo] = h.Sum(nil)
	}
	return sums, nil
}

// fetchChecksum fetches the first checksum file the depot has beside the
// archive at u.
func (s *Store) fetchChecksum(ctx context.Context, u string) (algo string, sum []byte, err error) {
	for _, c := range checksums {
		var data []byte
		err := s.get(ctx, u+c.ext, func(body io.Reader, _ int64) error {
			var err error
			data, err = io.ReadAll(io.LimitReader(body, maxChecksumFile))
			return err
		})
		if errors.Is(err, errMissing) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		sum, err := parseChecksum(data, c.new().Size())
		if err != nil {
			return "", nil, fmt.Errorf("checksum file %s: %w", u+c.ext, err)
		}
		return c.algo, sum, nil
	}
	return "", nil, fmt.Errorf("depot has no checksum for %s (tried .sha256 and .md5); refusing an unverified archive: %w", u, errdefs.ErrInvalid)
}

// parseChecksum reads "hex" or "hex  filename" as sha256sum and md5sum write.
func parseChecksum(data []byte, size int) ([]byte, error) {
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty: %w", errdefs.ErrInvalid)
	}
	sum, err := hex.DecodeString(fields[0])
	if err != nil || len(sum) != size {
		return nil, fmt.Errorf("%.80q is not a %d-byte hex digest: %w", fields[0], size, errdefs.ErrInvalid)
	}
	return sum, nil
}

// get fetches u and hands the body to read, trying again after each of
// the retry waits while failures are transient. read must start over on
// each call. A 404 is errMissing; transient failures that outlast the
// tries are errdefs.ErrUnavailable.
func (s *Store) get(ctx context.Context, u string, read func(body io.Reader, length int64) error) error {
	var err error
	for i, wait := range s.waits {
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		err = s.try(ctx, u, read)
		var te *transientError
		if !errors.As(err, &te) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("artifact depot request failed", "url", u, "try", i+1, "of", len(s.waits), "err", err)
	}
	return fmt.Errorf("depot unavailable after %d tries: %w: %w", len(s.waits), err, errdefs.ErrUnavailable)
}

func (s *Store) try(ctx context.Context, u string, read func(io.Reader, int64) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return &transientError{err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return read(bodyReader{resp.Body}, resp.ContentLength)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("GET %s: %s: %w", u, resp.Status, errMissing)
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout:
		return &transientError{fmt.Errorf("GET %s: %s", u, resp.Status)}
	default:
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
}

// bodyReader marks errors reading a response body as transient, so a
// connection dropped mid-download is tried again, while read's own
// verdicts (too large) are not.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = &transientError{err}
	}
	return n, err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
