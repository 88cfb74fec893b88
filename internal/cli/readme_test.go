package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSaysWhichGoFirst: the README says which Go the build needs,
// the one go.mod names, and the line that gets it, before its first
// command (a newcomer on Debian 12's Go met "invalid go version" and no
// word on what to install).
func TestReadmeSaysWhichGoFirst(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod names no go version")
	}
	want := "Go " + string(m[1])
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, _, ok := strings.Cut(string(readme), "go run ./cmd/nodemgr dev")
	if !ok {
		t.Fatal("README does not give its first command, go run ./cmd/nodemgr dev")
	}
	if !strings.Contains(before, want) {
		t.Errorf("README does not say %q before its first command", want)
	}
	if !strings.Contains(before, "go"+string(m[1])+".linux-") {
		t.Errorf("README gives no line that gets go%s before its first command", m[1])
	}
}
