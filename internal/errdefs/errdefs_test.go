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
