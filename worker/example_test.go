package worker_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodemgr/nodemgr/worker"
)

// A worker program runs tasks in-process. Name it in the suite's
// worker_schedule.worker_command; the agent starts it.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := worker.Run(ctx, func(ctx context.Context, t worker.Task) worker.Result {
		// t.Argv, t.Env and t.Workdir say what to do; honour ctx.
		if len(t.Argv) == 0 {
			return worker.Result{ExitCode: 2, Stderr: "nothing to do"}
		}
		return worker.Result{Stdout: "done " + t.Argv[0]}
	})
	if err != nil {
		log.Fatal(err)
	}
}
