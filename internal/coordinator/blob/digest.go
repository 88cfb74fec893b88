package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// algorithm is the one hash blobs are named by.
const algorithm = "sha256"

// Digest names a blob: the SHA-256 of its content. Its text form is
// "sha256:" and 64 lowercase hex digits. The zero Digest names nothing
// (Put reads it as "no expectation"). Digests compare with ==.
type Digest struct{ sum [sha256.Size]byte }

// Sum returns the digest of b.
func Sum(b []byte) Digest { return Digest{sum: sha256.Sum256(b)} }

// ParseDigest reads the text form of a digest. It is strict, so that one
// blob has exactly one name: no other algorithm, no uppercase, no
// missing or extra digits. The error is an errdefs.ErrInvalid.
func ParseDigest(s string) (Digest, error) {
	alg, hexPart, ok := strings.Cut(s, ":")
	switch {
	case s == "":
		return Digest{}, badDigest(s, "empty; want sha256:<64 lowercase hex digits>")
	case !ok:
		return Digest{}, badDigest(s, "no algorithm; want sha256:<64 lowercase hex digits>")
	case alg != algorithm:
		return Digest{}, badDigest(s, "algorithm %q is not supported; only sha256", alg)
	case len(hexPart) != 2*sha256.Size:
		return Digest{}, badDigest(s, "%d hex digits, want 64", len(hexPart))
	}
	for i, c := range hexPart {
		switch {
		case c >= 'A' && c <= 'F':
			return Digest{}, badDigest(s, "uppercase hex digit %q at %d; digests are lowercase", c, i)
		case !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f'):
			return Digest{}, badDigest(s, "%q at %d is not a hex digit", c, i)
		}
	}
	var d Digest
	hex.Decode(d.sum[:], []byte(hexPart)) // checked above
	return d, nil
}

func badDigest(s, format string, args ...any) error {
	if len(s) > 80 { // a digest is 71 bytes; the rest is noise in a message
		s = s[:80] + "..."
	}
	return errdefs.Class(fmt.Errorf("parse digest %q: %s", s, fmt.Sprintf(format, args...)), errdefs.ErrInvalid)
}

// String is the text form, "sha256:<hex>", or "" for the zero Digest.
func (d Digest) String() string {
	if d.IsZero() {
		return ""
	}
	return algorithm + ":" + d.Hex()
}

// Hex is the 64 lowercase hex digits, without the algorithm.
func (d Digest) Hex() string { return hex.EncodeToString(d.sum[:]) }

// IsZero reports whether d names nothing.
func (d Digest) IsZero() bool { return d == Digest{} }

// MarshalText writes the text form; the zero Digest is "".
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads the text form as ParseDigest does; "" is the zero
// Digest.
func (d *Digest) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = Digest{}
		return nil
	}
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}
