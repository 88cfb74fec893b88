package workerpool

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/workerpool/workerpooltest"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
	"github.com/nodemgr/nodemgr/worker"
)

// The test binary doubles as the worker program: with helperEnv set it runs
// one of the helpers below instead of the tests.
const helperEnv = "WORKERPOOL_TEST_HELPER"

func TestMain(m *testing.M) {
	switch mode := os.Getenv(helperEnv); mode {
	case "":
		os.Exit(m.Run())
	case "worker": // a well-behaved worker that stops on SIGTERM
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		exitOn(worker.Run(ctx, helperHandler))
	case "worker-nosignal": // dies of SIGTERM, as a program that ignores signals does
		exitOn(worker.Run(context.Background(), helperHandler))
	case "raw":
		exitOn(rawWorker())
	case "idle": // holds a slot while a test plays its worker
		time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", mode)
		os.Exit(2)
	}
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helperHandler does what the task's argv says.
func helperHandler(ctx context.Context, t worker.Task) worker.Result {
	arg := func(i int) string {
		if i < len(t.Argv) {
			return t.Argv[i]
		}
		return ""
	}
	switch arg(0) {
	case "ok":
		return worker.Result{Stdout: "ok " + t.ID}
	case "env":
		return worker.Result{Stdout: strings.Join(os.Environ(), "\n")}
	case "uid":
		return worker.Result{Stdout: strconv.Itoa(os.Getuid())}
	case "fail":
		code, _ := strconv.Atoi(arg(1))
		return worker.Result{ExitCode: code, Stderr: "failing"}
	case "sleep": // honours ctx
		d, _ := time.ParseDuration(arg(1))
		select {
		case <-time.After(d):
			return worker.Result{}
		case <-ctx.Done():
			return worker.Result{ExitCode: -1, Err: context.Cause(ctx)}
		}
	case "hang": // ignores ctx
		d, _ := time.ParseDuration(arg(1))
		time.Sleep(d)
		return worker.Result{}
	case "segv", "term":
		// A Go program cannot die of a signal it did not get from the
		// kernel for a fault; a shell in its place can.
		sig := map[string]string{"segv": "SEGV", "term": "TERM"}[arg(0)]
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", "kill -s " + sig + " $$"}, os.Environ())
		return worker.Result{ExitCode: -1, Err: err}
	case "gosegv": // an unrecovered fault: the runtime reports it and exits 2
		go func() {
			var p *int
			println(*p)
		}()
		time.Sleep(time.Hour)
	case "exit-leaving-child": // a child out of the worker's group keeps its stderr
		cmd := exec.Command("sleep", "30")
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // set before Start returns
		if err := cmd.Start(); err != nil {
			return worker.Result{ExitCode: -1, Err: err}
		}
		os.WriteFile(arg(1), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
		os.Exit(3)
	case "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "exit":
		code, _ := strconv.Atoi(arg(1))
		os.Exit(code)
	}
	return worker.Result{ExitCode: 2, Err: fmt.Errorf("helper: unknown task %q", t.Argv)}
}

// rawWorker speaks the protocol by hand so that it can break it. A task
// ["<misdeed>", dir] commits the misdeed if it can create dir (so only the
// first time); any other task, or a repeat, succeeds.
func rawWorker() error {
	nc, err := net.Dial("unix", os.Getenv(workerproto.EnvSocket))
	if err != nil {
		return err
	}
	c := workerproto.NewConn(nc)
	id, _ := strconv.Atoi(os.Getenv(workerproto.EnvWorkerID))
	c.Write(workerproto.Frame{Op: workerproto.OpHello, Hello: &workerproto.Hello{
		Version: workerproto.Version, WorkerID: id, Token: os.Getenv(workerproto.EnvToken), PID: os.Getpid()}})
	if f, err := c.Read(); err != nil || f.Op != workerproto.OpAck {
		return fmt.Errorf("no ack: %v %v", f.Op, err)
	}
	for {
		if err := c.Write(workerproto.Frame{Op: workerproto.OpFetch}); err != nil {
			return err
		}
		f, err := c.Read()
		if err != nil {
			return err
		}
		if f.Task == nil || f.Task.Done {
			return nil
		}
		t := f.Task.Task
		if len(t.Argv) == 2 && os.Mkdir(t.Argv[1], 0o755) == nil {
			switch t.Argv[0] {
			case "garbage":
				c.WriteRaw([]byte("{this is not json\n"))
			case "unknown-op":
				c.Write(workerproto.Frame{Op: "dance"})
			case "wrong-report":
				c.Write(workerproto.Frame{Op: workerproto.OpReport, Report: &workerproto.Report{
					TaskReport: api.TaskReport{TaskID: "not-" + t.ID, Outcome: api.OutcomeSucceeded}}})
			case "bad-outcome":
				c.Write(workerproto.Frame{Op: workerproto.OpReport, Report: &workerproto.Report{
					TaskReport: api.TaskReport{TaskID: t.ID, Outcome: "great"}}})
			case "double-fetch":
				c.Write(workerproto.Frame{Op: workerproto.OpFetch})
			case "hang-up":
				c.Close()
			}
			time.Sleep(time.Hour) // linger until the pool kills us
		}
		r := api.TaskReport{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeSucceeded}
		if err := c.Write(workerproto.Frame{Op: workerproto.OpReport, Report: &workerproto.Report{TaskReport: r}}); err != nil {
			return err
		}
	}
}

var (
	newSource   = workerpooltest.NewSource
	task        = workerpooltest.Task
	tasks       = workerpooltest.Tasks
	withTimeout = workerpooltest.WithTimeout
	waitFor     = workerpooltest.WaitFor
)

// config is a pool of the helper worker in mode.
func config(t testing.TB, mode string, workers, prefetch int) Config {
	return Config{
		SuiteID: "suite-1", SuiteName: "test", NodeID: "node-1",
		Workers: workers, Prefetch: prefetch,
		Command: []string{os.Args[0]},
		// The race detector holds a process for a second at exit by default.
		Env: []string{helperEnv + "=" + mode, "GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"},
		Dir: shortTempDir(t),
	}
}

// shortTempDir is a temp dir with a path short enough for a socket
// (t.TempDir's can be too long with a long test name).
func shortTempDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "wp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// running is a pool whose Run is in progress.
type running struct {
	*Pool
	errc chan error
}

func start(t testing.TB, cfg Config, src Source) *running {
	t.Helper()
	p, err := New(cfg, src)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := &running{Pool: p, errc: make(chan error, 1)}
	go func() { r.errc <- p.Run(context.Background()) }()
	t.Cleanup(func() {
		p.Stop(false)
		select {
		case <-r.errc:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after Stop(false)")
		}
	})
	return r
}

// checkEachFetchedEnded fails t unless every task the pool fetched was
// reported or given back, once.
func checkEachFetchedEnded(t testing.TB, rec workerpooltest.Record) {
	t.Helper()
	ended := slices.Clone(rec.Returned)
	for _, r := range rec.Reports {
		ended = append(ended, r.TaskID)
	}
	slices.Sort(ended)
	if fetched := slices.Sorted(slices.Values(rec.Fetched)); !slices.Equal(ended, fetched) {
		t.Errorf("reported+returned = %v, want each fetched task once: %v", ended, fetched)
	}
}

// finish fails t unless Run returns nil within.
func (r *running) finish(t testing.TB, within time.Duration) {
	t.Helper()
	if err := r.wait(t, within); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// wait waits for Run to return and gives its error.
func (r *running) wait(t testing.TB, within time.Duration) error {
	t.Helper()
	select {
	case err := <-r.errc:
		r.errc <- err // for Cleanup
		return err
	case <-time.After(within):
		t.Fatalf("Run did not return within %v; stats %+v", within, r.Stats())
		return nil
	}
}
