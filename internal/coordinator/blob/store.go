package blob

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Store holds blobs. Its methods are safe for concurrent use, by several
// processes too where the backend is shared (S3).
type Store interface {
	// Put stores r's bytes, hashing them as they stream. If want is not
	// zero the content must hash to it, else the error is an
	// errdefs.ErrInvalid and nothing is stored. maxSize > 0 caps the
	// content (over it: errdefs.ErrTooLarge, an ErrInvalid too, nothing
	// stored). Storing a blob that exists is cheap and refreshes its
	// ModTime, so Collect keeps it for another retention.
	Put(ctx context.Context, r io.Reader, want Digest, maxSize int64) (Info, error)
	// Stat describes a blob; errdefs.ErrNotFound when there is none.
	Stat(ctx context.Context, d Digest) (Info, error)
	// Open returns a blob's content; errdefs.ErrNotFound when there is
	// none. The caller closes it.
	Open(ctx context.Context, d Digest) (io.ReadCloser, Info, error)
	// Delete removes a blob; one that is absent is not an error.
	Delete(ctx context.Context, d Digest) error
	// Walk calls fn for every blob, in digest order, and stops at the
	// first error fn returns, returning it.
	Walk(ctx context.Context, fn func(Info) error) error
}

// Info describes a stored blob.
type Info struct {
	Digest Digest
	Size   int64
	// ModTime is when the blob was last stored (by a first Put or a
	// repeated one): Collect's measure of age.
	ModTime time.Time
}

// copyHashed copies r to w, hashing it, and returns its digest and size.
// It refuses content over maxSize (when maxSize > 0) or, when want is
// not zero, content that does not hash to want: the caller then drops
// what w got.
func copyHashed(ctx context.Context, w io.Writer, r io.Reader, want Digest, maxSize int64) (Info, error) {
	h := sha256.New()
	var src io.Reader = ctxReader{ctx, r}
	if maxSize > 0 {
		src = io.LimitReader(src, maxSize+1) // one byte more tells "over"
	}
	n, err := io.Copy(io.MultiWriter(w, h), src)
	if err != nil {
		return Info{}, err
	}
	if maxSize > 0 && n > maxSize {
		return Info{}, &tooLarge{max: maxSize}
	}
	var d Digest
	h.Sum(d.sum[:0])
	if !want.IsZero() && d != want {
		return Info{}, errdefs.Class(fmt.Errorf("content hashes to %s, not %s as given", d, want), errdefs.ErrInvalid)
	}
	return Info{Digest: d, Size: n}, nil
}

// tooLarge is content over Put's size cap: an errdefs.ErrTooLarge, and
// so an errdefs.ErrInvalid too.
type tooLarge struct{ max int64 }

func (e *tooLarge) Error() string {
	return fmt.Sprintf("content is over the blob size cap of %d bytes; send a smaller file or raise --blob-max-size", e.max)
}

func (e *tooLarge) Is(target error) bool {
	return target == errdefs.ErrTooLarge || target == errdefs.ErrInvalid
}

// ctxReader stops a long copy once ctx is done: a reader such as a
// request body may otherwise block or stream on long after the caller
// gave up.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// checkDigest refuses the zero Digest where a blob must be named.
func checkDigest(d Digest) error {
	if d.IsZero() {
		return errdefs.Class(fmt.Errorf("no digest given"), errdefs.ErrInvalid)
	}
	return nil
}
