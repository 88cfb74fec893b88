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
	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/store"
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
	hw, err := JSONArg(n.Hardware)
	if err != nil {
		return nil, err
	}
	return []any{
		n.Name, n.MachineID, n.DataDir, tags, labels, groups, hw,
		n.Status, n.StatusReason, n.AgentState, n.AgentVersion, n.CurrentSuite,
		TimeArg(n.LastHeartbeat), n.RegisteredAt.UnixNano(), n.UpdatedAt.UnixNano(),
	}, nil
}
