package worker

import (
	"context"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// A worker gives back the tasks it holds behind the running one when the
// agent asks (Release), names them in Released, and neither runs nor
// reports them; the running task, and any it was not asked for, it runs
// and reports as usual.
func TestReleaseGivesBackUnstartedTasks(t *testing.T) {
	started := make(chan string, 8)
	finish := make(chan struct{})
	a, _ := startFakeAgent(t, func(ctx context.Context, tk Task) Result {
		started <- tk.ID
		if tk.ID == "t1" {
			<-finish
		}
		return Result{}
	})
	if f := a.read(); f.Op != workerproto.OpFetch {
		t.Fatalf("frame %q, want fetch", f.Op)
	}
	batch := []*api.Task{{ID: "t2", Attempt: 1}, {ID: "t3", Attempt: 1}, {ID: "t4", Attempt: 1}}
	a.write(workerproto.Frame{Op: workerproto.OpTask, Task: &workerproto.TaskFrame{
		Task: &api.Task{ID: "t1", Attempt: 1}, More: batch}})
	if id := <-started; id != "t1" {
		t.Fatalf("started %s first, want t1", id)
	}
	a.write(workerproto.Frame{Op: workerproto.OpRelease, Release: &workerproto.Release{TaskIDs: []string{"t1", "t4", "t2", "gone"}}})
	f := a.read()
	if f.Op != workerproto.OpReleased || f.Released == nil {
		t.Fatalf("answer to release: %q frame, want released", f.Op)
	}
	if want := []string{"t2", "t4"}; !slices.Equal(f.Released.TaskIDs, want) {
		t.Errorf("released %v, want %v: the queued tasks asked for, not the running one", f.Released.TaskIDs, want)
	}
	close(finish)
	var reported []string
	for len(reported) < 2 {
		f := a.read()
		switch f.Op {
		case workerproto.OpReport:
			reported = append(reported, f.Report.TaskID)
		case workerproto.OpFetch:
			t.Fatalf("fetch after reports %v, want t1 and t3 reported first", reported)
		default:
			t.Fatalf("unexpected %q frame", f.Op)
		}
	}
	if want := []string{"t1", "t3"}; !slices.Equal(reported, want) {
		t.Errorf("reported %v, want %v", reported, want)
	}
	if f := a.read(); f.Op != workerproto.OpFetch {
		t.Errorf("frame %q after the last report, want fetch", f.Op)
	}
	close(started)
	var ran []string
	for id := range started {
		ran = append(ran, id)
	}
	if want := []string{"t3"}; !slices.Equal(ran, want) {
		t.Errorf("started %v after t1, want %v", ran, want)
	}
}

// A worker says in its hello that it answers Release.
func TestHelloOffersRelease(t *testing.T) {
	a, _ := startFakeAgent(t, func(context.Context, Task) Result { return Result{} })
	if a.hello.Hello == nil || !a.hello.Hello.Release {
		t.Errorf("hello %+v, want release offered", a.hello.Hello)
	}
}
