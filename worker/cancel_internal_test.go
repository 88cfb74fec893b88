package worker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// fakeAgent plays the pool's side of one worker's connection.
type fakeAgent struct {
	t     *testing.T
	c     *workerproto.Conn
	hello workerproto.Frame
}

// startFakeAgent listens where run will connect and runs h in a worker
// session against it; the returned channel gives run's error.
func startFakeAgent(t *testing.T, h Handler) (*fakeAgent, <-chan error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	t.Setenv(workerproto.EnvSocket, sock)
	t.Setenv(workerproto.EnvWorkerID, "0")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, h, 0) }()
	t.Cleanup(cancel)
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a := &fakeAgent{t: t, c: workerproto.NewConn(nc)}
	t.Cleanup(func() { a.c.Close() })
	if a.hello = a.read(); a.hello.Op != workerproto.OpHello {
		t.Fatalf("first frame %q, want hello", a.hello.Op)
	}
	a.write(workerproto.Frame{Op: workerproto.OpAck, Ack: &workerproto.Ack{}})
	return a, errc
}

func (a *fakeAgent) read() workerproto.Frame {
	a.t.Helper()
	a.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := a.c.Read()
	if err != nil {
		a.t.Fatalf("read from the worker: %v", err)
	}
	return f
}

func (a *fakeAgent) write(fs ...workerproto.Frame) {
	a.t.Helper()
	if err := a.c.Write(fs...); err != nil {
		a.t.Fatalf("write to the worker: %v", err)
	}
}

// readReport reads frames up to the worker's next report.
func (a *fakeAgent) readReport() api.TaskReport {
	a.t.Helper()
	for {
		f := a.read()
		if f.Op == workerproto.OpReport {
			return f.Report.TaskReport
		}
		if f.Op != workerproto.OpFetch {
			a.t.Fatalf("unexpected %q frame from the worker", f.Op)
		}
	}
}

func taskFrame(id string, attempt int, argv ...string) workerproto.Frame {
	return workerproto.Frame{Op: workerproto.OpTask, Task: &workerproto.TaskFrame{
		Task: &api.Task{ID: id, Attempt: attempt, TaskSpec: api.TaskSpec{Argv: argv}}}}
}

func cancelFrame(id string, attempt int) workerproto.Frame {
	return workerproto.Frame{Op: workerproto.OpCancel, Cancel: &workerproto.Cancel{TaskID: id, Attempt: attempt, Reason: "timeout"}}
}

// A cancel is about one attempt of a task: one that arrives for an attempt
// already reported does not touch the task's next attempt, whether it
// comes before the retry starts or while it runs; a cancel of the attempt
// that runs (or of whatever attempt runs, 0) still cancels it.
func TestCancelIsPerAttempt(t *testing.T) {
	sleepy := func(ctx context.Context, t Task) Result {
		select {
		case <-time.After(300 * time.Millisecond):
			return Result{}
		case <-ctx.Done():
			return Result{ExitCode: -1, Err: context.Cause(ctx)}
		}
	}
	cases := []struct {
		name string
		// frames the agent sends after the first attempt's report
		frames  []workerproto.Frame
		outcome string
		reason  string
	}{
		{"stale cancel before the retry", []workerproto.Frame{cancelFrame("t1", 1), taskFrame("t1", 2, "x")}, api.OutcomeSucceeded, ""},
		{"stale cancel while the retry runs", []workerproto.Frame{taskFrame("t1", 2, "x"), cancelFrame("t1", 1)}, api.OutcomeSucceeded, ""},
		{"cancel of the retry", []workerproto.Frame{taskFrame("t1", 2, "x"), cancelFrame("t1", 2)}, api.OutcomeFailed, "timeout"},
		{"cancel of any attempt", []workerproto.Frame{taskFrame("t1", 2, "x"), cancelFrame("t1", 0)}, api.OutcomeFailed, "timeout"},
		{"cancel of the retry before it starts", []workerproto.Frame{cancelFrame("t1", 2), taskFrame("t1", 2, "x")}, api.OutcomeFailed, "timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first := true
			a, _ := startFakeAgent(t, func(ctx context.Context, tk Task) Result {
				if first { // the first attempt ends at once, as one cut off by its own timeout does
					first = false
					return Result{ExitCode: 1}
				}
				return sleepy(ctx, tk)
			})
			if f := a.read(); f.Op != workerproto.OpFetch {
				t.Fatalf("frame %q, want fetch", f.Op)
			}
			a.write(taskFrame("t1", 1, "x"))
			if r := a.readReport(); r.Attempt != 1 {
				t.Fatalf("first report is for attempt %d, want 1", r.Attempt)
			}
			a.write(tc.frames...)
			r := a.readReport()
			if r.Attempt != 2 || r.Outcome != tc.outcome || r.Reason != tc.reason {
				t.Errorf("retry reported %+v, want attempt 2 %s %q", r, tc.outcome, tc.reason)
			}
		})
	}
}
