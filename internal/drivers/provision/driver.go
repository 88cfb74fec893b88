package provision

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// NameOrRandom is the spec's name, or, when it gives none, a fresh one:
// "nodemgr-" and 12 random hex digits, which every provider takes as a
// machine name.
func (s Spec) NameOrRandom() string {
	if s.Name != "" {
		return s.Name
	}
	b := make([]byte, 6)
	rand.Read(b)
	return "nodemgr-" + hex.EncodeToString(b)
}

// Undo runs undo, which takes away what a failed Provision made, on a
// context that outlives ctx's cancellation by up to timeout: a half-made
// machine must not be orphaned because the caller gave up. It returns
// err, with undo's own failure added under what ("removing container
// c0ffee").
func Undo(ctx context.Context, timeout time.Duration, err error, what string, undo func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if uerr := undo(cctx); uerr != nil {
		return fmt.Errorf("%w (and %s failed: %v)", err, what, uerr)
	}
	return err
}
