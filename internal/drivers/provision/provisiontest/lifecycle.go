package provisiontest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// EC2's in-between states each verb may pass through on its way.
var via = map[string][]string{
	provision.VerbStop:      {provision.StateRunning, provision.StateStopping},
	provision.VerbStart:     {provision.StateStopped, provision.StateHibernated, provision.StatePending},
	provision.VerbReboot:    {provision.StatePending},
	provision.VerbHibernate: {provision.StateRunning, provision.StateStopping},
	provision.VerbTerminate: {provision.StateRunning, provision.StateStopping, provision.StateStopped, provision.StateHibernated, provision.StateShuttingDown},
}

// allowed reports whether the provider lists verb and the machine d may
// do it.
func allowed(lc provision.Lifecycle, p provision.Provider, d provision.Deployment, verb string) bool {
	if !slices.Contains(lc.Verbs(), verb) {
		return false
	}
	vc, ok := p.(provision.VerbChecker)
	return !ok || vc.CheckVerb(d, verb) == nil
}

// do performs verb through provision.Do and waits for the state it leads to.
func (s *suite) do(t *testing.T, d provision.Deployment, verb, want string) {
	t.Helper()
	if err := provision.Do(ctxFor(t), s.Provider, verb, d); err != nil {
		t.Fatalf("Do(%s, %s) = %v", verb, d.Name, err)
	}
	s.await(t, d, verb, want, via[verb]...)
}

func testLifecycle(t *testing.T, s *suite) {
	lc, ok := s.Provider.(provision.Lifecycle)
	if !ok {
		t.Skip("the provider has no lifecycle control (VerbsRefused checks that it refuses every verb)")
	}
	for _, v := range lc.Verbs() {
		if !slices.Contains(provision.Verbs, v) {
			t.Errorf("Verbs() lists %q, which is no lifecycle verb (%v)", v, provision.Verbs)
		}
	}
	d, _ := s.provision(t)
	can := func(verb string) bool { return allowed(lc, s.Provider, d, verb) }

	if can(provision.VerbStop) {
		s.do(t, d, provision.VerbStop, provision.StateStopped)
		if can(provision.VerbStart) {
			s.do(t, d, provision.VerbStart, provision.StateRunning)
		}
	}
	if s.state(t, d) == provision.StateRunning && can(provision.VerbReboot) {
		s.do(t, d, provision.VerbReboot, provision.StateRunning)
	}
	if s.state(t, d) == provision.StateRunning && can(provision.VerbHibernate) {
		s.do(t, d, provision.VerbHibernate, provision.StateHibernated)
		if can(provision.VerbStart) {
			s.do(t, d, provision.VerbStart, provision.StateRunning)
		}
	}
	if can(provision.VerbTerminate) {
		s.do(t, d, provision.VerbTerminate, provision.StateTerminated)
		if err := s.Provider.Destroy(ctxFor(t), d); err != nil {
			t.Errorf("Destroy(%s) after terminate = %v, want nil", d.Name, err)
		}
	}
}

func testVerbsRefused(t *testing.T, s *suite) {
	d, _ := s.provision(t)
	lc, ok := s.Provider.(provision.Lifecycle)
	if !ok {
		for _, verb := range provision.Verbs {
			err := provision.Do(ctxFor(t), s.Provider, verb, d)
			checkClass(t, fmt.Sprintf("Do(%s) without Lifecycle", verb), err, errdefs.ErrInvalid, "verb")
		}
		return
	}
	refused := []string{"suspend"} // no verb at all
	for _, verb := range provision.Verbs {
		if !allowed(lc, s.Provider, d, verb) {
			refused = append(refused, verb)
		}
	}
	for _, verb := range refused {
		t.Run(verb, func(t *testing.T) {
			err := provision.Do(ctxFor(t), s.Provider, verb, d)
			checkClass(t, fmt.Sprintf("Do(%s) with Verbs() %v", verb, lc.Verbs()), err, errdefs.ErrInvalid, "verb")
			if st := s.state(t, d); st != provision.StateRunning {
				t.Errorf("after a refused %s, State = %q, want it left running", verb, st)
			}
		})
	}
}

func testRebootStopped(t *testing.T, s *suite) {
	lc, ok := s.Provider.(provision.Lifecycle)
	if !ok {
		t.Skip("the provider has no lifecycle control")
	}
	d, _ := s.provision(t)
	if !allowed(lc, s.Provider, d, provision.VerbStop) || !allowed(lc, s.Provider, d, provision.VerbReboot) {
		t.Skipf("this machine cannot both stop and reboot (Verbs() %v)", lc.Verbs())
	}
	s.do(t, d, provision.VerbStop, provision.StateStopped)
	err := provision.Do(ctxFor(t), s.Provider, provision.VerbReboot, d)
	checkClass(t, "Do(reboot) of a stopped machine", err, errdefs.ErrConflict, "")
	if st := s.state(t, d); st != provision.StateStopped {
		t.Errorf("after a refused reboot, State = %q, want it left stopped", st)
	}
}

func sprint(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// Steps does each step's verb (a step is a verb and the state the machine
// is in right after it) on d through provision.Do, in turn, and fails t
// unless p's State is then the step's at once (a provider whose verbs
// wait until they are done), each within took.
func Steps(ctx context.Context, t *testing.T, p interface {
	provision.Provider
	provision.Lifecycle
}, d provision.Deployment, took time.Duration, steps [][2]string) {
	t.Helper()
	for i, s := range steps {
		verb, want := s[0], s[1]
		start := time.Now()
		if err := provision.Do(ctx, p, verb, d); err != nil {
			t.Fatalf("step %d: Do(%s) = %v", i, verb, err)
		}
		if el := time.Since(start); el > took {
			t.Errorf("step %d: %s took %v", i, verb, el)
		}
		if got, err := p.State(ctx, d); err != nil || got != want {
			t.Fatalf("step %d: after %s State = %q, %v, want %q", i, verb, got, err, want)
		}
	}
}
