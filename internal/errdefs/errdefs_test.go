package errdefs

import (
	"errors"
	"fmt"
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
