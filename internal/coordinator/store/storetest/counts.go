package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// testCountsMatchTasks drives suites through random sequences of every
// operation that adds tasks or moves them between states, and after each
// one checks every suite's counts, as GetSuite and ListSuites give them,
// against a fresh count of the suite's tasks by state from ListTasks. The
// sequences are random but seeded, so a failure repeats.
func testCountsMatchTasks(t *testing.T, s store.Store) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			c := &churn{t: t, s: s, rng: rand.New(rand.NewPCG(seed, 0x636f756e7473)), prefix: fmt.Sprintf("c%d", seed)}
			c.newSuite()
			c.newSuite()
			for step := range 300 {
				op := c.step()
				c.check(fmt.Sprintf("step %d (%s)", step, op))
			}
		})
	}
}

// churn is one random sequence of operations on a store.
type churn struct {
	t      *testing.T
	s      store.Store
	rng    *rand.Rand
	prefix string

	suites []string     // every suite made
	open   []string     // those still Open
	tasks  []string     // every task added
	held   []store.Task // tasks as claims returned them, for reports true and stale
	n      int          // suites and tasks made
}

var churnNodes = []string{"n1", "n2", "n3"}

func (c *churn) newSuite() string {
	c.n++
	id := fmt.Sprintf("%s-s%d", c.prefix, c.n)
	mustCreateSuite(c.t, c.s, newSuite(id))
	c.suites = append(c.suites, id)
	c.open = append(c.open, id)
	return id
}

func (c *churn) node() string { return churnNodes[c.rng.IntN(len(churnNodes))] }

func pick[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

// step runs one random operation and names it.
func (c *churn) step() string {
	t, ctx := c.t, c.t.Context()
	switch r := c.rng.IntN(100); {
	case r < 20:
		if len(c.open) == 0 {
			c.newSuite()
		}
		suite := pick(c.rng, c.open)
		tasks := make([]store.Task, 1+c.rng.IntN(8))
		for i := range tasks {
			c.n++
			tasks[i] = prioritized(fmt.Sprintf("%s-t%d", c.prefix, c.n), c.rng.IntN(3))
			c.tasks = append(c.tasks, tasks[i].ID)
		}
		mustAddTasks(t, c.s, suite, tasks...)
		return fmt.Sprintf("AddTasks(%s, %d)", suite, len(tasks))

	case r < 45:
		suite, node, max := pick(c.rng, c.suites), c.node(), c.rng.IntN(7)
		c.held = append(c.held, mustClaim(t, c.s, suite, node, max)...)
		return fmt.Sprintf("ClaimTasks(%s, %s, %d)", suite, node, max)

	case r < 75:
		if len(c.held) == 0 {
			return "nothing to report"
		}
		// Mostly the node's own attempts, some stale or repeated, some of
		// other nodes' tasks, and one of a task that is not there.
		node := c.node()
		own := slices.DeleteFunc(slices.Clone(c.held), func(tk store.Task) bool { return tk.NodeID != node })
		var reports []store.Attempt
		for range 1 + c.rng.IntN(8) {
			tk := pick(c.rng, c.held)
			if len(own) > 0 && c.rng.IntN(4) > 0 {
				tk = pick(c.rng, own)
			}
			if c.rng.IntN(8) == 0 {
				tk.Attempt += c.rng.IntN(3) - 1
			}
			var a store.Attempt
			switch o := c.rng.IntN(20); {
			case o < 10:
				a = succeeded(tk)
			case o < 17:
				a = failed(tk, "boom")
			default:
				a = stopped(tk)
			}
			reports = append(reports, a)
			if c.rng.IntN(8) == 0 {
				reports = append(reports, a)
			}
		}
		if c.rng.IntN(10) == 0 {
			reports = append(reports, succeeded(store.Task{ID: "ghost", Attempt: 1}))
		}
		abort := pick(c.rng, []store.RetryPolicy{nil, abortAfter(1), abortAfter(2)})
		if _, err := c.s.FinishAttempts(ctx, node, reports, abort); err != nil {
			t.Fatalf("FinishAttempts(%s, %d reports) = %v, want nil", node, len(reports), err)
		}
		return fmt.Sprintf("FinishAttempts(%s, %d reports)", node, len(reports))

	case r < 83:
		node := c.node()
		ids := []string{"ghost"}
		for range min(len(c.held), c.rng.IntN(6)) {
			ids = append(ids, pick(c.rng, c.held).ID)
		}
		if _, err := c.s.ReturnTasks(ctx, node, ids); err != nil {
			t.Fatalf("ReturnTasks(%s, %q) = %v, want nil", node, ids, err)
		}
		return fmt.Sprintf("ReturnTasks(%s, %d ids)", node, len(ids))

	case r < 88:
		node := c.node()
		if _, err := c.s.ReclaimNode(ctx, node); err != nil {
			t.Fatalf("ReclaimNode(%s) = %v, want nil", node, err)
		}
		return fmt.Sprintf("ReclaimNode(%s)", node)

	case r < 95:
		if len(c.tasks) == 0 {
			return "nothing to cancel"
		}
		id := pick(c.rng, c.tasks)
		if _, err := c.s.CancelTask(ctx, id); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("CancelTask(%s) = %v, want nil or %v", id, err, errdefs.ErrConflict)
		}
		return fmt.Sprintf("CancelTask(%s)", id)

	default:
		// A suite ends: cancelled, or closed and completed once drained.
		// Another takes its place.
		if len(c.open) == 0 {
			c.newSuite()
		}
		suite := pick(c.rng, c.open)
		c.open = slices.DeleteFunc(c.open, func(id string) bool { return id == suite })
		c.newSuite()
		if c.rng.IntN(2) == 0 {
			setSuiteState(t, c.s, suite, api.SuiteCancelled)
			return fmt.Sprintf("UpdateSuite(%s) to Cancelled", suite)
		}
		setSuiteState(t, c.s, suite, api.SuiteClosed)
		if _, err := c.s.CompleteSuites(ctx); err != nil {
			t.Fatalf("CompleteSuites() = %v, want nil", err)
		}
		return fmt.Sprintf("UpdateSuite(%s) to Closed, CompleteSuites", suite)
	}
}

// check compares every suite's counts with its tasks.
func (c *churn) check(after string) {
	t, ctx := c.t, c.t.Context()
	t.Helper()
	listed, err := c.s.ListSuites(ctx, store.SuiteFilter{})
	if err != nil {
		t.Fatalf("ListSuites() after %s = %v, want nil", after, err)
	}
	for _, id := range c.suites {
		tasks, err := c.s.ListTasks(ctx, store.TaskFilter{SuiteID: id})
		if err != nil {
			t.Fatalf("ListTasks(%s) after %s = %v, want nil", id, after, err)
		}
		var want api.TaskCounts
		for _, tk := range tasks {
			switch tk.State {
			case api.TaskReady:
				want.Ready++
			case api.TaskRunning:
				want.Running++
			case api.TaskFinished:
				want.Finished++
			case api.TaskFailed:
				want.Failed++
			case api.TaskCancelled:
				want.Cancelled++
			default:
				t.Fatalf("ListTasks(%s) after %s: task %s is %q", id, after, tk.ID, tk.State)
			}
		}
		if got := mustGetSuite(t, c.s, id).Counts; got != want {
			t.Fatalf("GetSuite(%s).Counts after %s = %+v, want %+v as its tasks are", id, after, got, want)
		}
		i := slices.IndexFunc(listed, func(su store.Suite) bool { return su.ID == id })
		if i < 0 {
			t.Fatalf("ListSuites() after %s lacks suite %s", after, id)
		}
		if got := listed[i].Counts; got != want {
			t.Fatalf("ListSuites() suite %s counts after %s = %+v, want %+v as its tasks are", id, after, got, want)
		}
	}
}

// CheckCounts compares suite_counts, summed over the rows a suite's counts
// may spread over, with the tasks' states counted afresh; db reaches the
// store's database beneath it.
func CheckCounts(t testing.TB, db *sql.DB) {
	t.Helper()
	read := func(query string) map[string]api.TaskCounts {
		t.Helper()
		rows, err := db.QueryContext(context.Background(), query)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		out := map[string]api.TaskCounts{}
		for rows.Next() {
			var id string
			var c api.TaskCounts
			if err := rows.Scan(&id, &c.Pending, &c.Ready, &c.Running, &c.Finished, &c.Failed, &c.Cancelled); err != nil {
				t.Fatal(err)
			}
			out[id] = c
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	kept := read(`SELECT suite_id, sum(pending), sum(ready), sum(running), sum(finished), sum(failed), sum(cancelled)
		FROM suite_counts GROUP BY suite_id`)
	counted := read(`SELECT suites.id,
			COUNT(*) FILTER (WHERE tasks.state = 'pending'),
			COUNT(*) FILTER (WHERE tasks.state = 'ready'),
			COUNT(*) FILTER (WHERE tasks.state = 'running'),
			COUNT(*) FILTER (WHERE tasks.state = 'finished'),
			COUNT(*) FILTER (WHERE tasks.state = 'failed'),
			COUNT(*) FILTER (WHERE tasks.state = 'cancelled')
		FROM suites LEFT JOIN tasks ON tasks.suite_id = suites.id
		GROUP BY suites.id`)
	if diff := cmp.Diff(counted, kept); diff != "" {
		t.Errorf("suite_counts differ from the tasks counted by state (-counted +kept):\n%s", diff)
	}
}
