package provisiontest

import (
	"fmt"
	"slices"
	"testing"

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
