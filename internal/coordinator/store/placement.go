package store

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Which nodes may run a suite's tasks is a security rule, not a hint: a
// suite of group A must never hand its tasks (their env, their inputs) to a
// node outside A, whatever a cache in front of the store believes. So the
// rule lives here, beside the data, and both stores check it inside the
// claim's own transaction; the server asks the same function to explain a
// waiting suite, so the reason shown and the rule enforced cannot differ.

// Misfit says why a node may not run a suite's tasks.
type Misfit int

// Kinds of misfit, in the order Fit checks them.
const (
	Fits           Misfit = iota
	MisfitStopped         // the suite's pool was stopped on the node by hand
	MisfitAssigned        // the suite is explicitly assigned to other nodes
	MisfitTags            // the node lacks some of the suite's tags
	MisfitGroup           // the node is not in the suite's group
)

// Placement is what of a suite decides which nodes may run its tasks.
type Placement struct {
	Group    string   // spec.group: "" for any node
	Tags     []string // spec.tags: a node needs all of them
	Assigned []string // node IDs; when set, these alone, whatever their tags
	Stopped  []string // node IDs where the suite was stopped by hand
}

// Placement returns the suite's placement.
func (su Suite) Placement() Placement {
	return Placement{Group: su.Spec.Group, Tags: su.Spec.Tags, Assigned: su.AssignedNodes, Stopped: su.StoppedNodes}
}

// Fit says whether the node with id, tags and groups may run the suite's
// tasks: Fits, or the first misfit and, for MisfitTags, the tags it lacks.
// An explicit assignment overrides tags and group: assigning a node needs
// Write on it as well as on the suite.
func (p Placement) Fit(nodeID string, tags, groups []string) (Misfit, []string) {
	if slices.Contains(p.Stopped, nodeID) {
		return MisfitStopped, nil
	}
	if len(p.Assigned) > 0 {
		if slices.Contains(p.Assigned, nodeID) {
			return Fits, nil
		}
		return MisfitAssigned, nil
	}
	var missing []string
	for _, t := range p.Tags {
		if !slices.Contains(tags, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return MisfitTags, missing
	}
	if p.Group != "" && !slices.Contains(groups, p.Group) {
		return MisfitGroup, nil
	}
	return Fits, nil
}

// Authorize is Fit as an error: nil when the node may run the suite's
// tasks, else errdefs.ErrPermission saying why.
func (p Placement) Authorize(suiteID, nodeID string, tags, groups []string) error {
	m, missing := p.Fit(nodeID, tags, groups)
	var why string
	switch m {
	case Fits:
		return nil
	case MisfitStopped:
		why = "it was stopped there by hand"
	case MisfitAssigned:
		why = "it is assigned to other nodes"
	case MisfitTags:
		why = "the node lacks tags [" + strings.Join(missing, ",") + "]"
	case MisfitGroup:
		why = "the node is not in the suite's group"
	}
	return fmt.Errorf("node %s may not run tasks of suite %s: %s: %w", nodeID, suiteID, why, errdefs.ErrPermission)
}
