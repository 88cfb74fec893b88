// Package blob is the server's store for the files that tasks take as
// input and give as output. A blob is content addressed: it is named by
// the SHA-256 of its bytes ("sha256:<64 hex digits>", see Digest), so a
// file that many tasks share is stored once, a name never changes its
// content, and a reader can check what it got.
//
// Store is the interface the server uses. Two backends implement it:
// Dir, files under the server's data directory (the default), and S3,
// an S3-compatible bucket, for when several server replicas must see the
// same blobs. Collect is the garbage collector over either: it deletes
// the blobs no task refers to once they are older than a retention, so a
// blob uploaded just before its task is submitted survives.
//
// Package blobtest holds the conformance suite every backend passes.
package blob
