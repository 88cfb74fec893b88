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
	if p.User == su.Owner && what != WorkSuite {
		return su, nil
	}
	if !p.Can(api.RoleRead, SuiteGroups(su)) {
		if p.User == su.Owner {
			return su, p.Require(api.RoleWrite, SuiteGroups(su), "suite "+su.Spec.Name)
		}
		return store.Suite{}, errdefs.NotFound("suite %q (see nodemgr suite ls)", ref)
	}
	role := api.RoleWrite
	if what == ReadSuite {
		role = api.RoleRead
	}
	return su, p.Require(role, SuiteGroups(su), "suite "+su.Spec.Name)
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
