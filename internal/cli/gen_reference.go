//go:build ignore

// gen_reference writes docs/cli.md from the command tree: go generate
// ./internal/cli.
package main

import (
	"bytes"
	"log"
	"os"

	"github.com/nodemgr/nodemgr/internal/cli"
)

func main() {
	var b bytes.Buffer
	if err := cli.Reference(&b); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("../../docs/cli.md", b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
