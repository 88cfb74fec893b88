package httpapi

import (
	"errors"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestByteBudget(t *testing.T) {
	b := NewByteBudget(100, "bodies")
	if err := b.Acquire(t.Context(), 60, time.Second); err != nil {
		t.Fatal(err)
	}
	// 60 + 60 does not fit: the second waits and gives up with 503.
	err := b.Acquire(t.Context(), 60, 50*time.Millisecond)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("acquire over the budget = %v, want ErrUnavailable", err)
	}
	// A release lets a waiter in.
	got := make(chan error, 1)
	go func() { got <- b.Acquire(t.Context(), 60, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	b.Release(60)
	if err := <-got; err != nil {
		t.Errorf("acquire after a release = %v, want nil", err)
	}
}
