// Package artifact installs versioned software artifacts on a node, the way
// nodee did: an artifact named group:artifact:version is fetched from the
// depot (an HTTP base URL) configured for its group, its checksum verified,
// and it is unpacked read-only under <prefix>/software/<group>/<artifact>/<version>.
// Services run from that tree and keep their own state elsewhere.
//
// Depot layout. For id g:a:v and depot base URL B, the store fetches
//
//	B/g/a/v/a-v.zip       (tried first)
//	B/g/a/v/a-v.tar.gz    (tried when the zip is 404)
//
// and beside the archive it found, its checksum:
//
//	<archive URL>.sha256  (tried first)
//	<archive URL>.md5     (accepted for old depots)
//
// A checksum file holds the hex digest, optionally followed by white space
// and the file name (the format sha256sum and md5sum write). An archive
// with no checksum is refused; so is one whose digest differs.
//
// An install is all or nothing: the archive is downloaded and unpacked in
// <prefix>/software/.tmp (the same file system), made read-only, and moved
// into place with one rename. Hostile archives — entries that climb out
// with "..", absolute names, symlinks or hard links that lead out, device
// files, more entries or bytes than the caps allow — are refused before
// anything is installed. Each installed version keeps a small manifest,
// .nodemgr-artifact.json, at the top of its tree.
package artifact
