// Package workerpooltest provides an in-memory task source for tests of
// worker pools and worker programs: a queue of tasks, and a record of what
// the pool did with them.
package workerpooltest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Source is an in-memory workerpool.Source. It hands out its queue in
// order and records every fetch, report and return.
type Source struct {
	mu       sync.Mutex
	queue    []api.Task
	open     bool
	fetched  []string
	maxes    []int
	at       []time.Time
	reports  []api.TaskReport
	returned []string
}

// NewSource returns a source of tasks that says done once all are fetched.
func NewSource(tasks ...api.Task) *Source { return &Source{queue: slices.Clone(tasks)} }

// SetOpen says whether more tasks may come: while open, an empty queue
// means none for now rather than done.
func (s *Source) SetOpen(open bool) {
	s.mu.Lock()
	s.open = open
	s.mu.Unlock()
}

// Add queues more tasks.
func (s *Source) Add(tasks ...api.Task) {
	s.mu.Lock()
	s.queue = append(s.queue, tasks...)
	s.mu.Unlock()
}

// Fetch hands out up to max queued tasks, as Running with Attempt one more.
// It says Drained when it handed out fewer than max, as a server does.
func (s *Source) Fetch(ctx context.Context, max int) (tasks []api.Task, done, drained bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxes = append(s.maxes, max)
	s.at = append(s.at, time.Now())
	n := min(max, len(s.queue))
	out := slices.Clone(s.queue[:n])
	s.queue = s.queue[n:]
	for i := range out {
		out[i].Attempt++
		out[i].State = api.TaskRunning
		s.fetched = append(s.fetched, out[i].ID)
	}
	return out, !s.open && len(s.queue) == 0, len(out) < max, nil
}

// Report records a report.
func (s *Source) Report(r api.TaskReport) {
	s.mu.Lock()
	s.reports = append(s.reports, r)
	s.mu.Unlock()
}

// Return records returned tasks.
func (s *Source) Return(ids []string) {
	s.mu.Lock()
	s.returned = append(s.returned, ids...)
	s.mu.Unlock()
}

// ReportFor returns the first report for a task, if any.
func (s *Source) ReportFor(id string) (api.TaskReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reports {
		if r.TaskID == id {
			return r, true
		}
	}
	return api.TaskReport{}, false
}

// Record is what a pool did with a source.
type Record struct {
	Fetched  []string    // task IDs, in the order handed out
	Maxes    []int       // the max of each Fetch call
	At       []time.Time // when each Fetch call came
	Reports  []api.TaskReport
	Returned []string
}

// Record returns a copy of the record so far.
func (s *Source) Record() Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Record{Fetched: slices.Clone(s.fetched), Maxes: slices.Clone(s.maxes), At: slices.Clone(s.at),
		Reports: slices.Clone(s.reports), Returned: slices.Clone(s.returned)}
}

// Task is a Ready task of suite "suite-1".
func Task(id string, argv ...string) api.Task {
	return api.Task{ID: id, SuiteID: "suite-1", TaskSpec: api.TaskSpec{Argv: argv}, State: api.TaskReady}
}

// Tasks is n tasks with the same argv, named prefix-000, prefix-001, ...
func Tasks(prefix string, n int, argv ...string) []api.Task {
	out := make([]api.Task, n)
	for i := range out {
		out[i] = Task(fmt.Sprintf("%s-%03d", prefix, i), argv...)
	}
	return out
}

// WithTimeout sets t's timeout.
func WithTimeout(t api.Task, d time.Duration) api.Task {
	t.Timeout = api.Duration(d)
	return t
}

// WaitFor polls cond until it holds, failing tb if within passes first.
func WaitFor(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
