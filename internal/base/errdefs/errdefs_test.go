package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestClassesSurviveTheWire(t *testing.T) {
	for _, class := range []error{ErrNotFound, ErrConflict, ErrInvalid, ErrUnavailable, ErrPermission, ErrUnauthenticated} {
		err := fmt.Errorf("get node n1: %w", class)
		back := FromAPI(ToAPI(err))
		if !errors.Is(back, class) {
			t.Errorf("FromAPI(ToAPI(%v)) lost class %v", err, class)
		}
		if back.Error() != Message(err) {
			t.Errorf("message = %q, want %q", back.Error(), Message(err))
		}
	}
}

func TestFieldErrorNamesField(t *testing.T) {
	err := fmt.Errorf("register: %w", Field("labels.zone", "must not be empty"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("field error is not ErrInvalid")
	}
	if got := ToAPI(err).Field; got != "labels.zone" {
		t.Errorf("ToAPI(...).Field = %q, want %q", got, "labels.zone")
	}
	if Code(errors.New("boom")) != "internal" {
		t.Errorf("unclassified error should be internal")
	}
}

func TestMessageDropsClassSuffix(t *testing.T) {
	err := fmt.Errorf("node vm is offline: %w", ErrConflict)
	if got := Message(err); got != "node vm is offline" {
		t.Errorf("Message(%q) = %q, want %q", err, got, "node vm is offline")
	}
	plain := fmt.Errorf("disk full")
	if got := Message(plain); got != "disk full" {
		t.Errorf("Message(%q) = %q", plain, got)
	}
}

// TestStorageFull: a full disk has a code of its own, is unavailable too
// (503, retry later), and keeps both across the wire.
func TestStorageFull(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"sentinel", fmt.Errorf("put task: %w", ErrStorageFull)},
		{"ENOSPC", FromOS(&fs.PathError{Op: "write", Path: "/data/blob", Err: syscall.ENOSPC})},
		{"EDQUOT", FromOS(&fs.PathError{Op: "write", Path: "/data/blob", Err: syscall.EDQUOT})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Code(tc.err); got != "storage_full" {
				t.Errorf("Code(%v) = %q, want storage_full", tc.err, got)
			}
			back := FromAPI(ToAPI(tc.err))
			for _, class := range []error{ErrStorageFull, ErrUnavailable} {
				if !errors.Is(tc.err, class) {
					t.Errorf("errors.Is(%v, %v) = false, want true", tc.err, class)
				}
				if !errors.Is(back, class) {
					t.Errorf("errors.Is(FromAPI(ToAPI(%v)), %v) = false, want true", tc.err, class)
				}
			}
			if errors.Is(back, ErrNotFound) {
				t.Errorf("FromAPI(ToAPI(%v)) is ErrNotFound", tc.err)
			}
		})
	}
	if got := Message(fmt.Errorf("add tasks: %w", ErrStorageFull)); got != "add tasks" {
		t.Errorf("Message(...storage full) = %q, want %q", got, "add tasks")
	}
	if Code(ErrUnavailable) != "unavailable" {
		t.Errorf("Code(ErrUnavailable) = %q, want unavailable", Code(ErrUnavailable))
	}
}

// TestMessagesSayWhatIsWrong: the text a person reads says "not found"
// for a missing thing, keeps the hint after it, drops a bare class suffix,
// and says a prefix repeated by a caller once.
func TestMessagesSayWhatIsWrong(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		class error
		want  string
	}{
		{"name and hint", NotFound("node %q (see nodemgr node ls)", "nosuch"), ErrNotFound, `node "nosuch" not found (see nodemgr node ls)`},
		{"name only", NotFound("task %q", "t1"), ErrNotFound, `task "t1" not found`},
		{"hint after semicolon", NotFound("container %s; deploy it first", "c1"), ErrNotFound, `container c1 not found; deploy it first`},
		{"several names", NotFound("%s token %q (see %s)", "API", "tk", "nodemgr token ls"), ErrNotFound, `API token "tk" not found (see nodemgr token ls)`},
		{"already says no", NotFound("no service %s on this node; list them", "a.b.c.d"), ErrNotFound, `no service a.b.c.d on this node; list them`},
		{"already says not", NotFound("artifact %s is not installed", "g:a:1"), ErrNotFound, `artifact g:a:1 is not installed`},
		{"argument is not the format", NotFound("node %q", "no-gpu"), ErrNotFound, `node "no-gpu" not found`},
		{"wrapped", fmt.Errorf("get suite: %w", NotFound("suite %q", "s")), ErrNotFound, `get suite: suite "s" not found`},
		{"raw sentinel keeps its meaning", fmt.Errorf("container c1: %w", ErrNotFound), ErrNotFound, `container c1 not found`},
		{"conflict has no suffix", Conflict("node %s is connected", "n1"), ErrConflict, `node n1 is connected`},
		{"conflict sentinel suffix dropped", fmt.Errorf("node vm is offline: %w", ErrConflict), ErrConflict, `node vm is offline`},
		{"repeated prefix", fmt.Errorf("hibernate x: %w", fmt.Errorf("hibernate x: container is exited: %w", ErrConflict)), ErrConflict, `hibernate x: container is exited`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Message(tc.err); got != tc.want {
				t.Errorf("Message(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if !errors.Is(tc.err, tc.class) {
				t.Errorf("errors.Is(%v, %v) = false, want true", tc.err, tc.class)
			}
			if back := FromAPI(ToAPI(tc.err)); !errors.Is(back, tc.class) || back.Error() != tc.want {
				t.Errorf("FromAPI(ToAPI(%v)) = %q (class kept: %v), want %q", tc.err, back, errors.Is(back, tc.class), tc.want)
			}
		})
	}
}
