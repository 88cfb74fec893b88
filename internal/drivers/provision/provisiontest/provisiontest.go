// Package provisiontest is the conformance suite for provision.Provider,
// with its optional capabilities provision.Lifecycle and Find (the
// orchestrator's Finder) where a provider has them. Every provider runs it
// from its own tests against a live backend:
//
//	func TestConformance(t *testing.T) {
//		provisiontest.Run(t, func(t *testing.T) provisiontest.Target {
//			p := startBackend(t)
//			return provisiontest.Target{
//				Provider: p,
//				Spec:     provision.Spec{Extra: map[string]any{"image": "..."}},
//				Invalid:  []provisiontest.Invalid{{Extra: map[string]any{"image": 42}, Field: "extra.image"}},
//			}
//		})
//	}
//
// The suite names the machines and labels them; labels the target puts in
// Spec.Labels are kept, so a target's own cleanup can find what a failing
// test left. Besides what the interfaces say, it pins down:
//
//   - Provision returns a running deployment of the provider's name, with
//     a ResourceID, the spec's name and template, and the spec's labels,
//     which are on the resource: Find by them returns it, and nothing
//     else;
//   - Destroy of a machine that is gone already is not an error, and the
//     State of a destroyed machine is terminated; Find no longer lists it;
//   - an Extra key of the provider's holding a bad value is
//     errdefs.ErrInvalid naming the field (extra.<key>), and nothing is made;
//   - nothing is left behind after a failed Provision;
//   - the verbs Verbs lists work through provision.Do and move State as
//     EC2 says: stop → stopped, start → running, reboot → running,
//     hibernate → hibernated, terminate → terminated, passing only through
//     EC2's in-between states (pending, stopping, shutting-down) on the way;
//   - a verb not in Verbs, or one that a provision.VerbChecker refuses for
//     this machine, is errdefs.ErrInvalid from provision.Do and leaves
//     the machine as it was; a provider without Lifecycle refuses every
//     verb;
//   - reboot of a stopped machine is errdefs.ErrConflict (provision.Do
//     checks it) and leaves it stopped.
package provisiontest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Labels the suite puts on every machine, as the orchestrator does (see
// internal/coordinator/orchestrate), so that Find is exercised with the labels it is
// really asked for.
const (
	LabelOwner        = "nodemgr.owner"
	LabelPool         = "nodemgr.pool"
	LabelDeploymentID = "nodemgr.deployment-id"
)

// Finder is the optional capability of listing the machines a provider
// made by their labels (the orchestrator's leak sweep uses it). The suite
// looks only at machines that are not gone: terminated ones, and ones
// shutting down, may be listed or not.
type Finder interface {
	Find(ctx context.Context, labels map[string]string) ([]provision.Deployment, error)
}

// Target is what a backend gives the suite for one test.
type Target struct {
	// Provider is the provider under test.
	Provider provision.Provider
	// Spec is a valid spec for Provider: its Extra, and Template and
	// Labels if the target wants them. The suite sets Name, adds labels
	// of its own, and sets Template when it is empty.
	Spec provision.Spec
	// Invalid are bad Extra values Provision must refuse as
	// errdefs.ErrInvalid naming the field. At least one is required.
	Invalid []Invalid
	// Failures are specs Provision must fail with, ideally after it has
	// made something (a command that exits at once, a launch the
	// backend fails), so that its cleanup is exercised. Optional.
	Failures []Failure
	// Leftovers, if set, lists what the backend holds that carries all
	// the labels and is not gone, looked at by the target's own means
	// rather than the provider under test. Optional: Find is used too
	// where the provider has it.
	Leftovers func(t *testing.T, labels map[string]string) []string
	// Timeout bounds each wait for a machine to reach a state; default
	// two minutes.
	Timeout time.Duration
}

// Invalid is an Extra value that Provision must refuse.
type Invalid struct {
	// Extra is merged over Target.Spec.Extra; a nil value removes the key.
	Extra map[string]any
	// Field is the field the error must name, such as "extra.image".
	Field string
}

// Failure is an Extra with which Provision must fail.
type Failure struct {
	Name string
	// Extra is merged over Target.Spec.Extra; a nil value removes the key.
	Extra map[string]any
}

// Run runs the suite. newTarget is called once per test, in that test;
// what it starts it should end with t.Cleanup.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"Provision", testProvision},
		{"Destroy", testDestroy},
		{"Invalid", testInvalid},
		{"Failure", testFailure},
		{"Lifecycle", testLifecycle},
		{"VerbsRefused", testVerbsRefused},
		{"RebootStopped", testRebootStopped},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t)
			if tg.Provider == nil {
				t.Fatal("the target has no Provider")
			}
			if tg.Timeout <= 0 {
				tg.Timeout = 2 * time.Minute
			}
			tc.run(t, newSuite(t, tg))
		})
	}
}

// suite is one test's view of its target.
type suite struct {
	Target
	owner string // this test's owner label: every machine it makes carries it
	made  []provision.Deployment
}

func newSuite(t *testing.T, tg Target) *suite {
	s := &suite{Target: tg, owner: "provisiontest-" + randHex(6)}
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

// ctxFor bounds what one test may spend on its target.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// spec returns the target's spec with extra merged over its Extra, a
// fresh name, and labels: the target's, this test's owner, and a fresh
// deployment ID.
func (s *suite) spec(t *testing.T, extra map[string]any) provision.Spec {
	sp := s.Spec
	sp.Name = name(t)
	if sp.Template == "" {
		sp.Template = "provisiontest"
	}
	sp.Extra = maps.Clone(s.Spec.Extra)
	if sp.Extra == nil {
		sp.Extra = map[string]any{}
	}
	for k, v := range extra {
		if v == nil {
			delete(sp.Extra, k)
		} else {
			sp.Extra[k] = v
		}
	}
	sp.Labels = maps.Clone(s.Spec.Labels)
	if sp.Labels == nil {
		sp.Labels = map[string]string{}
	}
	sp.Labels[LabelOwner] = s.owner
	sp.Labels[LabelPool] = "provisiontest"
	sp.Labels[LabelDeploymentID] = "pt-" + randHex(8)
	return sp
}

// provision makes a machine from the target's spec; it fails the test if
// Provision does.
func (s *suite) provision(t *testing.T) (provision.Deployment, provision.Spec) {
	t.Helper()
	sp := s.spec(t, nil)
	d, err := s.Provider.Provision(ctxFor(t), sp)
	if err != nil {
		t.Fatalf("Provision(%s) = %v", sp.Name, err)
	}
	s.made = append(s.made, d)
	return d, sp
}

// cleanup destroys what the test made, and what Find still lists under
// its owner label, so that a failing test leaves nothing behind.
func (s *suite) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, d := range s.made {
		if err := s.Provider.Destroy(ctx, d); err != nil {
			t.Errorf("cleanup: Destroy(%s) = %v", d.Name, err)
		}
	}
	f, ok := s.Provider.(Finder)
	if !ok {
		return
	}
	left, err := f.Find(ctx, map[string]string{LabelOwner: s.owner})
	if err != nil {
		t.Errorf("cleanup: Find = %v", err)
		return
	}
	for _, d := range left {
		if gone(d.State) {
			continue
		}
		t.Errorf("cleanup: %s (%s) was left behind, %s", d.Name, d.ResourceID, d.State)
		if err := s.Provider.Destroy(ctx, d); err != nil {
			t.Errorf("cleanup: Destroy(%s) = %v", d.Name, err)
		}
	}
}

// find returns what Find lists for labels, less machines that are gone
// or shutting down; ok is false when the provider has no Find.
func (s *suite) find(t *testing.T, labels map[string]string) (found []provision.Deployment, ok bool) {
	t.Helper()
	f, ok := s.Provider.(Finder)
	if !ok {
		return nil, false
	}
	all, err := f.Find(ctxFor(t), labels)
	if err != nil {
		t.Fatalf("Find(%v) = %v", labels, err)
	}
	for _, d := range all {
		if !gone(d.State) {
			found = append(found, d)
		}
	}
	return found, true
}

// gone reports whether a machine in state st is gone or on its way: a
// terminate or destroy need not wait for the end.
func gone(st string) bool {
	return st == provision.StateTerminated || st == provision.StateShuttingDown
}

// checkNothingLeft fails the test if anything carrying labels is still
// there (shutting down counts as gone), by the target's Leftovers and by
// Find.
func (s *suite) checkNothingLeft(t *testing.T, labels map[string]string, after string) {
	t.Helper()
	if s.Leftovers != nil {
		if left := s.Leftovers(t, labels); len(left) != 0 {
			t.Errorf("after %s, the backend still holds %v", after, left)
		}
	}
	if found, ok := s.find(t, labels); ok && len(found) != 0 {
		t.Errorf("after %s, Find(%v) = %v, want none", after, labels, names(found))
	}
}

// state returns the machine's state; the provider has Lifecycle.
func (s *suite) state(t *testing.T, d provision.Deployment) string {
	t.Helper()
	st, err := s.Provider.(provision.Lifecycle).State(ctxFor(t), d)
	if err != nil {
		t.Fatalf("State(%s) = %v", d.Name, err)
	}
	return st
}

// await polls State until it is want, failing the test if it shows a
// state other than want and via on the way, or takes longer than the
// target's Timeout.
func (s *suite) await(t *testing.T, d provision.Deployment, after, want string, via ...string) {
	t.Helper()
	deadline := time.Now().Add(s.Timeout)
	pause := 10 * time.Millisecond
	var seen []string
	for {
		st := s.state(t, d)
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
		if st == want {
			return
		}
		if !slices.Contains(via, st) {
			t.Fatalf("after %s, State(%s) went %v, want %s (by way of %v at most)", after, d.Name, seen, want, via)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, State(%s) went %v and is not %s after %v", after, d.Name, seen, want, s.Timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Second)
	}
}

// checkClass fails the test unless err is of class and, if field is set,
// a FieldError naming field.
func checkClass(t *testing.T, what string, err, class error, field string) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Errorf("%s = %v, want class %v", what, err, class)
		return
	}
	t.Logf("%s: %v", what, err)
	if field == "" {
		return
	}
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s = %v, want it to name the field %s", what, err, field)
	}
}

// name returns a machine name unique to this test and call, made of
// lowercase letters, digits and dashes, 63 bytes at most: a container, a
// libvirt domain and an EC2 Name tag take it alike.
func name(t *testing.T) string {
	n := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, t.Name())
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return "pt-" + strings.Trim(n, "-") + "-" + randHex(4)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func names(ds []provision.Deployment) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name + "(" + d.ResourceID + " " + d.State + ")"
	}
	return out
}
