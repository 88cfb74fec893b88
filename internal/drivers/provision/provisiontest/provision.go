package provisiontest

import (
	"maps"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func testProvision(t *testing.T, s *suite) {
	d, sp := s.provision(t)
	if d.Provider != s.Provider.Name() {
		t.Errorf("Provision: Provider = %q, want %q", d.Provider, s.Provider.Name())
	}
	if d.ResourceID == "" {
		t.Errorf("Provision: ResourceID is empty")
	}
	if d.Name != sp.Name || d.Template != sp.Template {
		t.Errorf("Provision: Name, Template = %q, %q, want %q, %q", d.Name, d.Template, sp.Name, sp.Template)
	}
	if d.State != provision.StateRunning {
		t.Errorf("Provision: State = %q, want %q", d.State, provision.StateRunning)
	}
	if len(d.Executors) == 0 {
		t.Errorf("Provision: no Executors: nothing could reach the machine")
	}
	checkLabels(t, "Provision", d, sp.Labels)
	if _, ok := s.Provider.(provision.Lifecycle); ok {
		if st := s.state(t, d); st != provision.StateRunning {
			t.Errorf("State after Provision = %q, want running", st)
		}
	}

	found, ok := s.find(t, sp.Labels)
	if !ok {
		return
	}
	if len(found) != 1 || found[0].ResourceID != d.ResourceID {
		t.Fatalf("Find(%v) = %v, want just %s (%s)", sp.Labels, names(found), d.Name, d.ResourceID)
	}
	f := found[0]
	if f.Provider != d.Provider || f.Name != d.Name || f.State != provision.StateRunning {
		t.Errorf("Find: Provider, Name, State = %q, %q, %q, want %q, %q, running", f.Provider, f.Name, f.State, d.Provider, d.Name)
	}
	checkLabels(t, "Find", f, sp.Labels)
	// The orchestrator's sweep and a cut-off launch find machines by one
	// label each.
	for _, k := range []string{LabelOwner, LabelDeploymentID} {
		one := map[string]string{k: sp.Labels[k]}
		if got, _ := s.find(t, one); len(got) != 1 || got[0].ResourceID != d.ResourceID {
			t.Errorf("Find(%v) = %v, want just %s", one, names(got), d.Name)
		}
	}
	other := maps.Clone(sp.Labels)
	other[LabelDeploymentID] = "pt-nobody"
	if got, _ := s.find(t, other); len(got) != 0 {
		t.Errorf("Find(%v) = %v, want none: no machine has that deployment ID", other, names(got))
	}
}

// checkLabels fails the test unless d carries every label in want.
func checkLabels(t *testing.T, what string, d provision.Deployment, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got, ok := d.Labels[k]; !ok || got != want[k] {
			t.Errorf("%s: Labels[%q] = %q, want %q (labels %v)", what, k, got, want[k], d.Labels)
		}
	}
}

func testDestroy(t *testing.T, s *suite) {
	d, sp := s.provision(t)
	ctx := ctxFor(t)
	for i := range 2 { // the second finds it gone
		if err := s.Provider.Destroy(ctx, d); err != nil {
			t.Fatalf("Destroy #%d(%s) = %v, want nil", i+1, d.Name, err)
		}
	}
	if _, ok := s.Provider.(provision.Lifecycle); ok {
		s.await(t, d, "Destroy", provision.StateTerminated, provision.StateShuttingDown)
	}
	s.checkNothingLeft(t, sp.Labels, "Destroy")
}

func testInvalid(t *testing.T, s *suite) {
	if len(s.Invalid) == 0 {
		t.Fatal("the target gives no Invalid Extra: every provider has keys whose values it checks")
	}
	for _, tc := range s.Invalid {
		t.Run(tc.Field, func(t *testing.T) {
			sp := s.spec(t, tc.Extra)
			d, err := s.Provider.Provision(ctxFor(t), sp)
			if err == nil {
				s.made = append(s.made, d)
			}
			checkClass(t, "Provision(Extra "+describe(tc.Extra)+")", err, errdefs.ErrInvalid, tc.Field)
			s.checkNothingLeft(t, sp.Labels, "a refused Provision")
		})
	}
}

func testFailure(t *testing.T, s *suite) {
	if len(s.Failures) == 0 {
		t.Skip("the target gives no failing spec")
	}
	for _, tc := range s.Failures {
		t.Run(tc.Name, func(t *testing.T) {
			sp := s.spec(t, tc.Extra)
			d, err := s.Provider.Provision(ctxFor(t), sp)
			if err == nil {
				s.made = append(s.made, d)
				t.Fatalf("Provision(Extra %s) succeeded, want an error", describe(tc.Extra))
			}
			t.Logf("Provision(Extra %s): %v", describe(tc.Extra), err)
			s.checkNothingLeft(t, sp.Labels, "a failed Provision")
		})
	}
}

// describe formats an Extra overlay for a message.
func describe(extra map[string]any) string {
	out := "{"
	for i, k := range slices.Sorted(maps.Keys(extra)) {
		if i > 0 {
			out += ", "
		}
		out += k + ": " + sprint(extra[k])
	}
	return out + "}"
}
