//go:build ignore

// gen writes docs/api.md from the OpenAPI document: go generate
// ./internal/apidoc.
package main

import (
	"bytes"
	"log"
	"os"

	"github.com/nodemgr/nodemgr/internal/apidoc"
)

func main() {
	doc, err := os.ReadFile("../../" + apidoc.Document)
	if err != nil {
		log.Fatal(err)
	}
	var b bytes.Buffer
	if err := apidoc.Reference(&b, doc); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("../../docs/api.md", b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
