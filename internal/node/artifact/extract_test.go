package artifact

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestCleanName(t *testing.T) {
	tests := []struct {
		in, want string
		err      string
	}{
		{in: "a/b", want: "a/b"},
		{in: "./a//b/", want: "a/b"},
		{in: "./", want: ""},
		{in: "a/./b", want: "a/b"},
		{in: "", err: "empty name"},
		{in: "../a", err: "leads out"},
		{in: "a/../b", err: "leads out"},
		{in: "/a", err: "absolute"},
		{in: `a\b`, err: "backslash"},
		{in: "a\x00b", err: "NUL"},
		{in: manifestName, err: "reserved"},
		{in: "./" + manifestName, err: "reserved"},
	}
	for _, tc := range tests {
		got, err := cleanName(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("cleanName(%q) = %q, %v, want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("cleanName(%q) = %q, %v, want ErrInvalid saying %q", tc.in, got, err, tc.err)
		}
	}
}

func TestSymlinkTargets(t *testing.T) {
	tests := []struct {
		name, target string
		ok           bool
	}{
		{"l", "x", true},
		{"l", ".", true},
		{"l", "./x/y", true},
		{"a/l", "..", true},
		{"a/l", "../x", true},
		{"a/b/l", "../../x", true},
		{"l", "..", false},
		{"a/l", "../..", false},
		{"a/l", "../../x", false},
		{"l", "/etc", false},
		{"l", "x/../y", false},
		{"a/l", "x/../..", false},
		{"l", "", false},
	}
	for _, tc := range tests {
		x := newTestExtractor(t, 1<<20, 100)
		err := x.symlink(tc.name, tc.target)
		if tc.ok != (err == nil) {
			t.Errorf("symlink(%q -> %q) = %v, want ok %v", tc.name, tc.target, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("symlink(%q -> %q) = %v, want ErrInvalid", tc.name, tc.target, err)
		}
	}
}

// The byte cap counts what really arrives, whatever the headers said.
func TestFileCountsRealBytes(t *testing.T) {
	x := newTestExtractor(t, 100, 10)
	if err := x.file("a", 0o644, strings.NewReader(strings.Repeat("a", 60))); err != nil {
		t.Fatal(err)
	}
	err := x.file("b", 0o644, strings.NewReader(strings.Repeat("b", 41)))
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "100-byte limit") {
		t.Errorf("file over the cap = %v, want ErrInvalid over the limit", err)
	}
}

func TestDefaults(t *testing.T) {
	s, err := New(t.TempDir(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 5 * time.Second, 15 * time.Second}
	if diff := cmp.Diff(want, s.waits); diff != "" {
		t.Errorf("default retry waits (-want +got):\n%s", diff)
	}
	if s.maxBytes != DefaultMaxBytes || s.maxFiles != DefaultMaxFiles {
		t.Errorf("caps = %d bytes, %d files; want %d, %d", s.maxBytes, s.maxFiles, DefaultMaxBytes, DefaultMaxFiles)
	}
}

func newTestExtractor(t *testing.T, maxBytes int64, maxFiles int) *extractor {
	t.Helper()
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return &extractor{root: root, maxBytes: maxBytes, maxFiles: maxFiles, kinds: map[string]kind{}}
}
