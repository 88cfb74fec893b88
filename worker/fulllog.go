package worker

import (
	"os"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// A task's full output, beyond the tails its report carries, goes to a log
// file of its attempt in the dir the agent names (package tasklog), which
// the agent serves while the task runs and stores when it ends.

// logOpenAfter is how long a command's output may wait in memory before
// its log file is made: a short task with a little output costs no file,
// and a longer one can be followed live.
const logOpenAfter = time.Second

// logSettings say where full logs go; zero: nowhere.
type logSettings struct {
	dir string
	max int64
}

// fullLogs is set from the environment once, before the first task.
var fullLogs logSettings

func readLogSettings() logSettings {
	ls := logSettings{dir: os.Getenv(workerproto.EnvLogDir), max: tasklog.DefaultMax}
	if n, err := strconv.ParseInt(os.Getenv(workerproto.EnvLogMax), 10, 64); err == nil {
		ls.max = n
	}
	return ls
}

// logWriter is the writer of an attempt's log; nil when logs are off.
func (ls logSettings) logWriter(taskID string, attempt int) *tasklog.Writer {
	return tasklog.NewWriter(tasklog.Path(ls.dir, taskID, attempt), ls.max, maxTail)
}

// keepFullOutput writes the output a handler returned whole, when it is
// more than the tails keep.
func keepFullOutput(t *api.Task, res Result) {
	w := fullLogs.logWriter(t.ID, t.Attempt)
	w.Write(tasklog.Stdout, []byte(res.Stdout))
	w.Write(tasklog.Stderr, []byte(res.Stderr))
	w.Close()
}
