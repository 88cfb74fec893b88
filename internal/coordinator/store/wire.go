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

// Wire is the user as the API shows it.
func (u User) Wire() api.User {
	g := u.Groups
	if g == nil {
		g = map[string]string{}
	}
	return api.User{Name: u.Name, Admin: u.Admin, Groups: g, CreatedAt: u.CreatedAt}
}

// Wire is the token as the API shows it, without its secret.
func (t Token) Wire() api.Token {
	out := api.Token{ID: t.ID, Kind: t.Kind, Name: t.Name, User: t.User, NodeID: t.NodeID, CreatedAt: t.CreatedAt,
		Groups: t.Groups, MaxUses: t.MaxUses, Uses: t.Uses}
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt
		out.ExpiresAt = &e
	}
	if !t.LastUsed.IsZero() {
		l := t.LastUsed
		out.LastUsed = &l
	}
	return out
}
