// Package sha256sum names content by its SHA-256 the way nodemgr writes it
// on the wire: "sha256:<64 lowercase hex digits>". Task inputs and
// outputs and the blobs that hold them are named so; release checksums
// use the hex part.
package sha256sum

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
)

// Prefix starts every digest: the name of the hash.
const Prefix = "sha256:"

// New returns a hash to write content into; Sum names what it was given.
func New() hash.Hash { return sha256.New() }

// Sum is the digest of what h (from New) was given.
func Sum(h hash.Hash) string { return Prefix + hex.EncodeToString(h.Sum(nil)) }

// Reader reads r to its end: the digest of what it held and its size.
func Reader(r io.Reader) (digest string, size int64, err error) {
	h := New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, err
	}
	return Sum(h), n, nil
}

// File is the digest and size of the file at path.
func File(path string) (digest string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	digest, size, err = Reader(f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return digest, size, nil
}

// Hex is the hex part of d, as sha256sum writes it.
func Hex(d string) string { return strings.TrimPrefix(d, Prefix) }
