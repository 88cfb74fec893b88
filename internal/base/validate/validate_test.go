package validate

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestTags(t *testing.T) {
	tests := []struct {
		name  string
		tags  []string
		field string // "" = valid
	}{
		{"ok", []string{"gpu", "cuda:11.8", "linux", "x86_64"}, ""},
		{"empty tag", []string{"gpu", ""}, "tags[1]"},
		{"space", []string{"a b"}, "tags[0]"},
		{"duplicate", []string{"a", "b", "a"}, "tags[2]"},
		{"too long", []string{string(make([]byte, 65))}, "tags[0]"},
		{"index 12", append(make([]string, 0), "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "!"), "tags[12]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Tags("tags", tc.tags)
			assertField(t, err, tc.field)
		})
	}
}

func TestLabelsAndGroups(t *testing.T) {
	assertField(t, Labels("labels", map[string]string{"zone": "eu-1", "rack/row": "7"}), "")
	assertField(t, Labels("labels", map[string]string{"bad key": "x"}), "labels.bad key")
	assertField(t, Groups("groups", []string{"ml-team", "ops"}), "")
	assertField(t, Groups("groups", []string{"ok", "Upper"}), "groups[1]")
	assertField(t, Name("name", "host-01.example"), "")
	assertField(t, Name("name", "-x"), "name")
}

func assertField(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("unexpected error %v", err)
		}
		return
	}
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Fatalf("error = %v, want a field error on %q", err, field)
	}
}

func TestSandboxPath(t *testing.T) {
	tests := []struct {
		p    string
		want string // a part of the reason; "" = valid
	}{
		{"a.c", ""},
		{"src/a.c", ""},
		{"src/", ""},
		{".", ""},
		{"..a", ""},
		{"", "must not be empty"},
		{"/abs", "relative to the task's sandbox"},
		{"src/./a.c", `not clean; write "src/a.c"`},
		{"./a.c", `not clean; write "a.c"`},
		{"a/../b", `not clean; write "b"`},
		{"a//b", `not clean; write "a/b"`},
		{"a/..", `not clean; write "."`},
		{"..", "leaves the task's sandbox"},
		{"../x", "leaves the task's sandbox"},
		{"a\\b", "NUL or a backslash"},
		{"a\x00b", "NUL or a backslash"},
	}
	for _, tc := range tests {
		t.Run(tc.p, func(t *testing.T) {
			err := SandboxPath("inputs[0].path", tc.p)
			if tc.want == "" {
				if err != nil {
					t.Errorf("SandboxPath(%q) = %v, want nil", tc.p, err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "inputs[0].path" || !strings.Contains(fe.Reason, tc.want) {
				t.Errorf("SandboxPath(%q) = %v, want a field error on inputs[0].path saying %q", tc.p, err, tc.want)
			}
		})
	}
}

func TestOneOf(t *testing.T) {
	for v, want := range map[string]string{"open": "Open", "OPEN": "Open", "Closed": "Closed"} {
		if got, err := OneOf("state", v, "Open", "Closed"); err != nil || got != want {
			t.Errorf("OneOf(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	if _, err := OneOf("state", "shut", "Open", "Closed"); err == nil || !strings.Contains(err.Error(), `must be Open or Closed, got "shut"`) {
		t.Errorf(`OneOf("shut") = %v, want it refused listing Open or Closed`, err)
	}
}

func TestOrList(t *testing.T) {
	for want, names := range map[string][]string{"": nil, "a": {"a"}, "a or b": {"a", "b"}, "a, b or c": {"a", "b", "c"}} {
		if got := OrList(names); got != want {
			t.Errorf("OrList(%q) = %q, want %q", names, got, want)
		}
	}
}

// TestLengthLimits pins the limits the patterns keep apart from their
// expressions: the longest name of each kind passes, one byte more fails.
func TestLengthLimits(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		check func(s string) error
		max   int
	}{
		{"tag", func(s string) error { return Tags("tags", []string{s}) }, 64},
		{"label key", func(s string) error { return Labels("labels", map[string]string{s: "v"}) }, 63},
		{"group", func(s string) error { return Group("group", s) }, 64},
		{"name", func(s string) error { return Name("name", s) }, 253},
	} {
		if err := tc.check(strings.Repeat("a", tc.max)); err != nil {
			t.Errorf("%s of %d bytes: %v, want accepted", tc.kind, tc.max, err)
		}
		if err := tc.check(strings.Repeat("a", tc.max+1)); err == nil {
			t.Errorf("%s of %d bytes accepted, want refused", tc.kind, tc.max+1)
		}
	}
}
