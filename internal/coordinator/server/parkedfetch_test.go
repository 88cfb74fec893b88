package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// TestParkedFetchClaimsWhatArrives: a fetch that finds nothing Ready and
// lets the server wait (wait_ms) is held there, and a task submitted
// meanwhile comes back on it, with no wake sent to the agent: the wake
// was the claim. A held fetch that nothing arrives for answers empty at
// its wait; one without wait_ms answers at once.
func TestParkedFetchClaimsWhatArrives(t *testing.T) {
	ts, a := serverWithAgent(t, 2)
	if !a.welcome.ParksFetch {
		t.Fatal("the welcome does not say the server parks fetches: agents would never ask it to")
	}
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites",
		api.SuiteSpec{Name: "parked", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	submit := func() string {
		var sub api.SubmitResult
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks",
			api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}}, &sub)
		return sub.IDs[0]
	}
	// The node takes the suite up for its first task and runs it.
	first := submit()
	a.join(su.ID)
	if n := a.fetch(su.ID, 8); n != 1 {
		t.Fatalf("the first fetch got %d tasks, want 1", n)
	}
	a.call(api.MethodTasksReport, api.TasksReport{Reports: []api.TaskReport{{TaskID: first, Attempt: 1, Outcome: api.OutcomeSucceeded}}}, nil)

	type fetched struct {
		resp api.TasksFetched
		err  error
	}
	fetchAsync := func(waitMS int) <-chan fetched {
		ch := make(chan fetched, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var f fetched
			f.err = a.peer.Call(ctx, api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: 8, WaitMS: waitMS}, &f.resp)
			ch <- f
		}()
		return ch
	}
	waitParked := func(n int) {
		t.Helper()
		want := fmt.Sprintf("# HELP nodemgr_task_fetches_parked Agents' task fetches held on this server until their suite has tasks Ready (tasks.fetch wait_ms).\n# TYPE nodemgr_task_fetches_parked gauge\nnodemgr_task_fetches_parked %d\n", n)
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := testutil.GatherAndCompare(ts.metrics.registry, strings.NewReader(want), "nodemgr_task_fetches_parked")
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("parked fetches: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	wakesBefore, _ := a.seen()
	got := fetchAsync(2000)
	waitParked(1)
	id := submit()
	f := <-got
	if f.err != nil || len(f.resp.Tasks) != 1 || f.resp.Tasks[0].ID != id {
		t.Fatalf("the parked fetch answered %+v, %v; want the task submitted while it waited", f.resp, f.err)
	}
	waitParked(0)
	if wakes, _ := a.seen(); wakes != wakesBefore {
		t.Errorf("the agent was sent %d wakes for the task its parked fetch claimed, want none", wakes-wakesBefore)
	}

	// Nothing arrives: the fetch answers empty once its wait is up.
	start := time.Now()
	f = <-fetchAsync(300)
	if f.err != nil || len(f.resp.Tasks) != 0 || f.resp.Done {
		t.Fatalf("a parked fetch nothing arrived for = %+v, %v; want empty, not done", f.resp, f.err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("a fetch with wait_ms 300 answered empty after %s: it was not held", waited)
	}
	// No wait_ms: no parking.
	f = <-fetchAsync(0)
	if f.err != nil || len(f.resp.Tasks) != 0 {
		t.Fatalf("a fetch without wait_ms = %+v, %v", f.resp, f.err)
	}
	waitParked(0)

	f = <-fetchAsync(-1)
	if !errors.Is(f.err, errdefs.ErrInvalid) || !strings.Contains(f.err.Error(), "wait_ms") {
		t.Errorf("wait_ms -1 = %v, want an error naming wait_ms", f.err)
	}
}
