//go:build !clientonly

package cli

import (
	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/worker"
)

func newWorkerCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run tasks for the agent that started this process (not for direct use)",
		Long: `Run as one worker of a suite's pool: the agent starts it with
NODEMGR_WORKER_SOCKET set, and it fetches tasks over that socket, runs each
task's command (argv, env, workdir, timeout), and reports the exit code or
signal with the tails of stdout and stderr. Given a user in
NODEMGR_WORKER_RUN_AS (an agent run as root, for a suite whose run_as is
another user), it starts each task as that user and stays the one that
tracks and stops the task's processes.

A program of your own can be the worker instead: build it on the Go package
github.com/nodemgr/nodemgr/worker and name it in the suite's
worker_schedule.worker_command; it runs as the suite's run_as user.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return worker.RunCommandWorker(cmd.Context())
		},
	}
}
