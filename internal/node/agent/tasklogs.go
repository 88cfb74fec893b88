package agent

import (
	"compress/gzip"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// An attempt's full output (package tasklog) is written by its worker to
//
//	<data dir>/tasklogs/<suite>/<task>.<attempt>.log
//
// which the agent serves to the server while the attempt runs (GET
// /v1/tasks/{task}/log on the local API, for `nodemgr task logs -f`) and,
// when it ends, uploads gzipped to the blob store with the report: the
// result names it (api.TaskLog), and the file goes. The dir is the
// agent's own and private; workers write it only where they run as the
// agent's user (the command worker always does), so no task's code can
// put a link there for the agent to upload.

// maxLogPiece bounds one answer of the live log: it crosses the session
// whole, base64 and all.
const maxLogPiece = 256 << 10

func (a *Agent) taskLogsDir() string { return filepath.Join(a.cfg.DataDir, "tasklogs") }

// suiteLogDir is where the attempts of a suite's tasks write their logs;
// "" for a suite ID that cannot name a dir.
func suiteLogDir(root, suiteID string) string {
	if p := tasklog.Path(root, suiteID, 0); p == "" {
		return ""
	}
	return filepath.Join(root, suiteID)
}

// storeLog uploads the log at path, gzipped, and names it in r's result;
// the log file goes either way. A log that cannot be stored costs the
// attempt nothing but its log: the tails are still in the result.
func (f *filesSource) storeLog(r *api.TaskReport, path string, max int64) {
	defer os.Remove(path)
	stdout, stderr, err := tasklog.Totals(path)
	if err != nil {
		f.log.Warn("read a task's log", "task", r.TaskID, "err", err)
		return
	}
	gz := path + ".gz"
	defer os.Remove(gz)
	if err := gzipFile(path, gz); err != nil {
		f.log.Warn("compress a task's log", "task", r.TaskID, "err", err)
		return
	}
	stored, err := f.blobs.upload(f.stopped, func() (*os.File, error) { return os.Open(gz) }, filepath.Base(path))
	if err != nil {
		f.log.Warn("store a task's log; its result keeps the tails only", "task", r.TaskID, "err", err)
		return
	}
	r.Result.Log = &api.TaskLog{Digest: stored.Digest, Bytes: stdout + stderr, Truncated: max > 0 && stdout+stderr > max}
}

func gzipFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(out, gzip.BestSpeed)
	if _, err := io.Copy(zw, in); err != nil {
		out.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// handleTaskLog answers a piece of a running attempt's log: whole frames
// from the byte offset after, as they are (the server picks the streams),
// and the offset they end at in api.HeaderLogCursor. 404: no log here (the
// attempt holds its output in memory yet, or has ended and its log went
// to the blob store).
func (a *Agent) handleTaskLog(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	attempt, err := strconv.Atoi(q.Get("attempt"))
	if err != nil || attempt < 1 {
		return errdefs.Field("attempt", "must be an attempt number >= 1, got %q", q.Get("attempt"))
	}
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if q.Get("after") == "" {
		after, err = 0, nil
	}
	if err != nil || after < 0 {
		return errdefs.Field("after", "must be the %s of an earlier answer, got %q", api.HeaderLogCursor, q.Get("after"))
	}
	dir := suiteLogDir(a.taskLogsDir(), q.Get("suite"))
	path := tasklog.Path(dir, r.PathValue("task"), attempt)
	if path == "" {
		return errdefs.Field("task", "not a task of a suite here")
	}
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return errdefs.NotFound("no log of task %s attempt %d on this node now", r.PathValue("task"), attempt)
	}
	if err != nil {
		return err
	}
	defer file.Close()
	if _, err := file.Seek(after, io.SeekStart); err != nil {
		return err
	}
	piece, err := tasklog.ReadFrames(file, maxLogPiece)
	if err != nil {
		return err
	}
	w.Header().Set(api.HeaderLogCursor, strconv.FormatInt(after+int64(len(piece)), 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(piece)
	return err
}

// suiteLogs is where a suite's attempts keep their logs here; dir "":
// they keep none (the server takes none, or the workers run as another
// user and could not write the agent's dir).
type suiteLogs struct {
	dir string
	max int64
}

// taskLogs makes the suite's log dir, empty, when its logs are kept.
func (r *runner) taskLogs(su api.Suite, as *runas.User, log *slog.Logger) suiteLogs {
	max := r.taskLogMax.Load()
	commandWorker := len(su.WorkerSchedule.WorkerCommand) == 0
	dir := suiteLogDir(r.env.sandbox.taskLogsDir(), su.ID)
	if max <= 0 || dir == "" || (as != nil && !commandWorker) {
		return suiteLogs{}
	}
	os.RemoveAll(dir) // left by an agent that stopped mid-suite
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("cannot keep the suite's task logs; results keep the tails only", "err", err)
		return suiteLogs{}
	}
	return suiteLogs{dir: dir, max: max}
}

// remove deletes the suite's logs dir once every report has gone.
func (l suiteLogs) remove() {
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// path is the log file of an attempt, "" when logs are not kept.
func (l suiteLogs) path(taskID string, attempt int) string {
	return tasklog.Path(l.dir, taskID, attempt)
}
