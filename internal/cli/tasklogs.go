package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/client"
)

func taskLogsCmd(e *env) *cobra.Command {
	var attempt int
	var stream string
	var followIt bool
	cmd := &cobra.Command{
		Use:   "logs TASK",
		Short: "Print a task attempt's whole output; -f follows it while it runs",
		Long: `Print the whole output of a task's attempt, stdout and stderr in the order
they came (the latest attempt, or --attempt N; --stream picks one stream).

While the attempt runs, what it printed so far comes from its node; once it
ended, from the server's blob store, where the server keeps up to
--task-log-max of each attempt's output (nodemgr server; 64 MiB by default).
An attempt that printed at most 64 KiB per stream and ended within a second
keeps no log of its own: its output is its result's, stdout then stderr.

With --follow, keep printing what the attempt prints until it ends, as
kubectl logs -f does; a task that has not started yet is waited for. The
server is asked twice a second; while the node or the server cannot be
reached the command waits for them.`,
		Example: `  nodemgr task logs s-3f2a-t17
  nodemgr task logs s-3f2a-t17 --attempt 1 --stream stderr
  nodemgr task logs -f s-3f2a-t17`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if attempt < 0 {
				return usagef("--attempt must be an attempt number >= 1, got %d", attempt)
			}
			switch stream {
			case "all", "stdout", "stderr":
			default:
				return usagef("--stream must be stdout, stderr or all, got %q", stream)
			}
			if stream == "all" {
				stream = ""
			}
			r := &taskLogReader{e: e, c: clientFor(cmd, e), task: args[0], attempt: attempt, stream: stream}
			if followIt {
				return r.follow(cmd.Context())
			}
			return r.readAll(cmd.Context())
		},
	}
	cmd.Flags().IntVar(&attempt, "attempt", 0, "which attempt (default the latest)")
	cmd.Flags().StringVar(&stream, "stream", "all", "stdout, stderr or all")
	cmd.Flags().BoolVarP(&followIt, "follow", "f", false, "keep printing what the attempt prints until it ends")
	return cmd
}

// taskLogReader reads an attempt's log piece by piece.
type taskLogReader struct {
	e       *env
	c       *client.Client
	task    string
	attempt int // 0: the latest, until the first answer names it
	stream  string
	cursor  string
}

// errLogDone ends a follow once the attempt's log is read to its end.
var errLogDone = errors.New("log complete")

// step reads and prints the next piece; it says whether more may be there
// at once, and errLogDone at the end of an ended attempt's log.
func (r *taskLogReader) step(ctx context.Context) (more bool, err error) {
	p, err := r.c.TaskLogs(ctx, r.task, r.attempt, r.stream, r.cursor)
	if err != nil {
		return false, err
	}
	if p.Attempt == 0 {
		return false, nil // not started
	}
	r.attempt = p.Attempt // follow this attempt, even once another starts
	if _, err := r.e.rawOut().Write(p.Text); err != nil {
		return false, err
	}
	advanced := p.Cursor != r.cursor
	r.cursor = p.Cursor
	if p.Complete {
		return false, errLogDone
	}
	return advanced && len(p.Text) > 0, nil
}

// readAll prints what there is now: all of an ended attempt's output, or
// what a running one printed so far.
func (r *taskLogReader) readAll(ctx context.Context) error {
	for {
		more, err := r.step(ctx)
		if errors.Is(err, errLogDone) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.attempt == 0 {
			fmt.Fprintf(r.e.stderr, "task %s has not started yet; nodemgr task logs -f %s waits for its output\n", r.task, r.task)
			return nil
		}
		if !more {
			return nil
		}
	}
}

// taskLogPoll is how often a followed attempt is asked for more.
const taskLogPoll = 500 * time.Millisecond

func (r *taskLogReader) follow(ctx context.Context) error {
	err := follow(ctx, r.e, taskLogPoll, func() (bool, error) { return r.step(ctx) })
	if errors.Is(err, errLogDone) {
		return nil
	}
	return err
}
