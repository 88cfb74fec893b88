// Package sqlrow is what the two SQL stores (store/sqlite and
// store/postgres) share above their SQL: how values are encoded in their
// columns (JSON text for lists, maps and specs; unix nanoseconds for times,
// 0 for a zero time where a column has no NULL), which states a row may
// hold, and how a transaction tallies the task counts it changed. The
// schemas hold the same tables and columns, so one encoding serves both;
// what differs (placeholders, NULL handling, driver types) stays in each.
package sqlrow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Tally is how a transaction changed the task counts of suites: signed
// differences by suite ID, applied to the suites' counts before it commits.
type Tally map[string]*api.TaskCounts

// Move records that n tasks of a suite went from one state to another;
// from is "" for new tasks.
func (t Tally) Move(suiteID, from, to string, n int) {
	if n == 0 || from == to {
		return
	}
	c := t[suiteID]
	if c == nil {
		c = new(api.TaskCounts)
		t[suiteID] = c
	}
	if from != "" {
		*CountOf(c, from) -= n
	}
	*CountOf(c, to) += n
}

// JSONArg encodes v for a JSON column, with nil lists and maps as empty ones.
func JSONArg(v any) (string, error) {
	switch v := v.(type) {
	case []string:
		if v == nil {
			return "[]", nil
		}
	case map[string]string:
		if v == nil {
			return "{}", nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func Strings(s string) ([]string, error) {
	v := []string{}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, err
	}
	if v == nil { // the text was "null"
		v = []string{}
	}
	return v, nil
}

func Map(s string) (map[string]string, error) {
	v := map[string]string{}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, err
	}
	if v == nil {
		v = map[string]string{}
	}
	return v, nil
}

func FromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// TimeOf reads a nullable time column: NULL is the zero time ("never").
func TimeOf(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return FromNanos(*n)
}

// OrNanos is t in unix nanoseconds, or now if t is zero.
func OrNanos(t time.Time, now int64) int64 {
	if t.IsZero() {
		return now
	}
	return t.UnixNano()
}

// ZeroNano stores a zero time as 0, where the column has no NULL.
func ZeroNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func NanoTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return FromNanos(n)
}

func DeploymentJSON(d store.Deployment) (executors, extra, labels string, err error) {
	enc := func(v any, empty string) string {
		if err != nil {
			return ""
		}
		b, e := json.Marshal(v)
		if e != nil {
			err = errdefs.Field("extra", "cannot be stored: %v", e)
		}
		if string(b) == "null" {
			return empty
		}
		return string(b)
	}
	return enc(d.Executors, "[]"), enc(d.Extra, "{}"), enc(d.Labels, "{}"), err
}

func EnsembleArgs(e api.Ensemble) ([]any, error) {
	spec, err := json.Marshal(e.Spec)
	if err != nil {
		return nil, err
	}
	if e.Replicas == nil {
		e.Replicas = []api.EnsembleReplica{}
	}
	replicas, err := json.Marshal(e.Replicas)
	if err != nil {
		return nil, err
	}
	if e.Lost == nil {
		e.Lost = []api.EnsembleReplica{}
	}
	lost, err := json.Marshal(e.Lost)
	if err != nil {
		return nil, err
	}
	return []any{e.ID, e.Name, string(spec), e.State, e.Reason, e.Owner, string(replicas), string(lost),
		e.CreatedAt.UnixNano(), e.UpdatedAt.UnixNano()}, nil
}

func ValidSuiteState(state string) bool {
	switch state {
	case api.SuiteOpen, api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled:
		return true
	}
	return false
}

// CountOf is the count of state in c. States are checked where they are
// written, so an unknown one is a bug.
func CountOf(c *api.TaskCounts, state string) *int {
	switch state {
	case api.TaskPending:
		return &c.Pending
	case api.TaskReady:
		return &c.Ready
	case api.TaskRunning:
		return &c.Running
	case api.TaskFinished:
		return &c.Finished
	case api.TaskFailed:
		return &c.Failed
	case api.TaskCancelled:
		return &c.Cancelled
	}
	panic(fmt.Sprintf("sqlrow: task state %q has no count", state))
}
func TimeArg(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// OrNow is t, or now if t is zero: creation times the caller did not set.
func OrNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// SuiteArgs are su's columns after id: spec, state, owner, assigned and
// stopped nodes, times, then name, group_name and priority, copied out of
// the spec.
func SuiteArgs(su store.Suite) ([]any, error) {
	switch {
	case su.Spec.Name == "":
		return nil, errdefs.Field("spec.name", "required")
	case !ValidSuiteState(su.State):
		return nil, errdefs.Field("state", "unknown state %q", su.State)
	}
	spec, err := json.Marshal(su.Spec)
	if err != nil {
		return nil, err
	}
	assigned, err := JSONArg(su.AssignedNodes)
	if err != nil {
		return nil, err
	}
	stopped, err := JSONArg(su.StoppedNodes)
	if err != nil {
		return nil, err
	}
	return []any{
		string(spec), su.State, su.Owner, assigned, stopped,
		su.CreatedAt.UnixNano(), su.UpdatedAt.UnixNano(), TimeArg(su.LastTaskAt),
		su.Spec.Name, su.Spec.Group, su.Spec.Priority,
	}, nil
}

// NodeArgs are n's columns after id, in nodeColumns order.
func NodeArgs(n store.Node) ([]any, error) {
	tags, err := JSONArg(n.Tags)
	if err != nil {
		return nil, err
	}
	labels, err := JSONArg(n.Labels)
	if err != nil {
		return nil, err
	}
	groups, err := JSONArg(n.Groups)
	if err != nil {
		return nil, err
	}
	if n.Hardware.GPUs == nil {
		// As it reads back: a node written again unchanged keeps the same
		// text, and does not move the nodes' revision (NodesRevision).
		n.Hardware.GPUs = []api.GPU{}
	}
	hw, err := JSONArg(n.Hardware)
	if err != nil {
		return nil, err
	}
	return []any{
		n.Name, n.MachineID, n.DataDir, tags, labels, groups, hw,
		n.Status, n.StatusReason, n.AgentState, n.AgentVersion, n.CurrentSuite,
		TimeArg(n.LastHeartbeat), n.RegisteredAt.UnixNano(), n.UpdatedAt.UnixNano(), n.Replica,
	}, nil
}

// ClaimAuth reads in one row what decides whether a node may claim tasks
// of a suite (store.Placement): the suite's group, its tags (a JSON array
// out of its spec; each dialect has its own expression for it, the first
// verb), its assigned and stopped nodes, and the node's ID, tags and
// groups ("" and "[]" when the node is not there). The second and third
// verbs are the driver's placeholders for the suite and the node.
const ClaimAuth = `SELECT s.group_name, COALESCE(%[1]s, '[]'), s.assigned_nodes, s.stopped_nodes,
		COALESCE(n.id, ''), COALESCE(n.tags, '[]'), COALESCE(n.group_names, '[]')
	FROM suites s LEFT JOIN nodes n ON n.id = %[3]s WHERE s.id = %[2]s`

// AuthorizeClaim checks the row of ClaimAuth that scan reads: nil when the
// node may claim the suite's tasks, errdefs.ErrPermission when it may not
// (or is not registered), and what scan returns when it fails (the
// driver's errdefs.ErrNotFound for a suite that is not there). It runs on
// every claim, so the lists, most often empty, are decoded only when not.
func AuthorizeClaim(suiteID, nodeID string, scan func(dest ...any) error) error {
	var group, node string
	var lists [5]string // suite tags, assigned, stopped; node tags, groups
	if err := scan(&group, &lists[0], &lists[1], &lists[2], &node, &lists[3], &lists[4]); err != nil {
		return err
	}
	if node == "" {
		return fmt.Errorf("node %s may not run tasks of suite %s: it is not registered: %w", nodeID, suiteID, errdefs.ErrPermission)
	}
	var decoded [5][]string
	for i, l := range lists {
		if l == "[]" {
			continue
		}
		var err error
		if decoded[i], err = Strings(l); err != nil {
			return fmt.Errorf("authorize node %s for suite %s: list %d: %w", nodeID, suiteID, i, err)
		}
	}
	p := store.Placement{Group: group, Tags: decoded[0], Assigned: decoded[1], Stopped: decoded[2]}
	return p.Authorize(suiteID, nodeID, decoded[3], decoded[4])
}
