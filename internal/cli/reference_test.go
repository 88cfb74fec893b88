package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReferenceFresh: docs/cli.md is what the command tree gives now.
func TestReferenceFresh(t *testing.T) {
	var want bytes.Buffer
	if err := Reference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatalf("docs/cli.md: %v; run go generate ./internal/cli", err)
	}
	if diff := cmp.Diff(strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")); diff != "" {
		t.Fatalf("docs/cli.md is stale: run go generate ./internal/cli\n(-file +generated, by line):\n%s", diff)
	}
}
