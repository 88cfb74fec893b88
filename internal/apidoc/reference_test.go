package apidoc

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReferenceFresh: docs/api.md is what the OpenAPI document gives now.
func TestReferenceFresh(t *testing.T) {
	doc, err := os.ReadFile("../../" + Document)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := Reference(&want, doc); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatalf("docs/api.md: %v; run go generate ./internal/apidoc", err)
	}
	if diff := cmp.Diff(strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")); diff != "" {
		t.Fatalf("docs/api.md is stale: run go generate ./internal/apidoc\n(-file +generated, by line):\n%s", diff)
	}
}
