package server

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAPIReferenceFresh: docs/api.md is what openapi.yaml gives now.
func TestAPIReferenceFresh(t *testing.T) {
	var want bytes.Buffer
	if err := APIReference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../docs/api.md")
	if err != nil {
		t.Fatalf("docs/api.md: %v; run go generate ./internal/coordinator/server", err)
	}
	if diff := cmp.Diff(strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")); diff != "" {
		t.Fatalf("docs/api.md is stale: run go generate ./internal/coordinator/server\n(-file +generated, by line):\n%s", diff)
	}
}
