// Command release builds a nodemgr release into a directory: static
// binaries for linux/amd64 and linux/arm64, SHA256SUMS, the modules in
// each binary, and the Debian package. Run it from the repo's root:
//
//	go run ./cmd/release -out dist
//
// Everything lives in internal/release.
package main

import (
	"os"

	"github.com/nodemgr/nodemgr/internal/release"
)

func main() { os.Exit(release.Main(os.Args[1:])) }
