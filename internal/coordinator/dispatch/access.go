package dispatch

import (
	"context"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Access is what a caller wants to do with a suite.
type Access int

const (
	ReadSuite Access = iota // see it and its tasks: its owner, or Read in its group
	StopSuite               // close or cancel it or its tasks: its owner, or Write
	WorkSuite               // add tasks or assign nodes, which runs commands on the group's nodes: Write, always
)

// SuiteGroups are the groups whose roles govern a suite: its group, if any.
func SuiteGroups(s store.Suite) []string {
	if s.Spec.Group == "" {
		return nil
	}
	return []string{s.Spec.Group}
}

// ResolveSuite finds a suite by ID or name and checks that p may do what
// with it. Owning a suite never outlives the role it was created with: a
// user whose Write role in the group was taken away may still read and
// stop their suites, but no longer make them run anything. A suite p may
// not even read is not found.
func (d *Dispatcher) ResolveSuite(ctx context.Context, p auth.Principal, ref string, what Access) (store.Suite, error) {
	su, err := d.store.GetSuite(ctx, ref)
	if errdefs.IsNotFound(err) {
		su, err = d.store.SuiteByName(ctx, ref)
	}
	if err != nil {
		if errdefs.IsNotFound(err) {
			return store.Suite{}, errdefs.NotFound("suite %q (see nodemgr suite ls)", ref)
		}
		return store.Suite{}, err
	}
	if err := checkSuiteAccess(p, su, ref, what); err != nil {
		if errdefs.IsNotFound(err) {
			return store.Suite{}, err
		}
		return su, err
	}
	return su, nil
}

// checkSuiteAccess says whether p may do what with su, which ref named. A
// suite p may not even read is not found.
func checkSuiteAccess(p auth.Principal, su store.Suite, ref string, what Access) error {
	if p.User == su.Owner && what != WorkSuite {
		return nil
	}
	if !p.Can(api.RoleRead, SuiteGroups(su)) {
		if p.User == su.Owner {
			return p.Require(api.RoleWrite, SuiteGroups(su), "suite "+su.Spec.Name)
		}
		return errdefs.NotFound("suite %q (see nodemgr suite ls)", ref)
	}
	role := api.RoleWrite
	if what == ReadSuite {
		role = api.RoleRead
	}
	return p.Require(role, SuiteGroups(su), "suite "+su.Spec.Name)
}

// ResolveTask finds a task by ID and checks that p may do what with its
// suite.
func (d *Dispatcher) ResolveTask(ctx context.Context, p auth.Principal, id string, what Access) (store.Task, error) {
	t, err := d.store.GetTask(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return t, errdefs.NotFound("task %q", id)
		}
		return t, err
	}
	if _, err := d.ResolveSuite(ctx, p, t.SuiteID, what); err != nil {
		return t, err
	}
	return t, nil
}

// ResolveSuiteSpec is ResolveSuite for callers that need only what never
// changes in a suite: its ID, owner and spec. Its state and counts may be
// old; whatever acts on the suite checks its state in the store (AddTasks
// refuses a suite that is no longer Open). A suite named by ID is read
// from the store once, not at every submit: a lone task's submit spent a
// store read (0.27 ms on an idle server) only to learn the suite's group.
func (d *Dispatcher) ResolveSuiteSpec(ctx context.Context, p auth.Principal, ref string, what Access) (store.Suite, error) {
	if su, ok := d.specs.get(ref); ok {
		return su, checkSuiteAccess(p, su, ref, what)
	}
	su, err := d.ResolveSuite(ctx, p, ref, what)
	if err == nil {
		d.specs.put(su)
	}
	return su, err
}
