//go:build ignore

// gen_api_reference writes docs/api.md from openapi.yaml: go generate
// ./internal/coordinator/server.
package main

import (
	"bytes"
	"log"
	"os"

	"github.com/nodemgr/nodemgr/internal/coordinator/server"
)

func main() {
	var b bytes.Buffer
	if err := server.APIReference(&b); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("../../../docs/api.md", b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
