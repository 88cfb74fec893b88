package store

import "github.com/nodemgr/nodemgr/api"

// Wire is the suite as the API shows it.
func (s Suite) Wire() api.Suite {
	out := api.Suite{ID: s.ID, SuiteSpec: s.Spec, State: s.State, Owner: s.Owner,
		AssignedNodes: s.AssignedNodes, StoppedNodes: s.StoppedNodes, Counts: s.Counts,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, LastTaskAt: s.LastTaskAt}
	if out.AssignedNodes == nil {
		out.AssignedNodes = []string{}
	}
	return out
}

// Wire is the task as the API shows it.
func (t Task) Wire() api.Task {
	out := api.Task{ID: t.ID, SuiteID: t.SuiteID, TaskSpec: t.Spec, State: t.State, Reason: t.Reason, Attempt: t.Attempt,
		NodeID: t.NodeID, Result: t.Result, Failures: t.Failures, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	if out.Failures == nil {
		out.Failures = []api.TaskFailure{}
	}
	return out
}
