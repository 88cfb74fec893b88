package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/filecopy"
	"github.com/nodemgr/nodemgr/internal/base/tick"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// maxLogRead caps what Logs returns when asked for the whole file.
const maxLogRead = 1 << 20

// rotateLogs checks the logs of the services that run, every interval,
// until ctx ends.
func (s *Supervisor) rotateLogs(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func() {
		for _, l := range s.liveLogs() {
			if err := rotateIn(l.dir, l.max, l.keep); err != nil {
				s.log.Warn("rotate service log", "coordinate", l.coord, "err", err)
			}
		}
	})
}

type liveLog struct {
	coord string
	dir   string // the runtime dir
	max   int64
	keep  int
}

func (s *Supervisor) liveLogs() []liveLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []liveLog
	for coord, sv := range s.svcs {
		if sv.proc == nil {
			continue
		}
		out = append(out, liveLog{
			coord: coord,
			dir:   sv.coord.RuntimeDir(s.cfg.Prefix),
			max:   int64(logMaxOf(sv.rec.Spec)) * s.cfg.LogUnit,
			keep:  logKeepOf(sv.rec.Spec),
		})
	}
	return out
}

func logMaxOf(spec api.ServiceSpec) int {
	if spec.Logs.MaxSizeMB == 0 {
		return workload.DefaultLogMaxMB
	}
	return spec.Logs.MaxSizeMB
}

func logKeepOf(spec api.ServiceSpec) int {
	if spec.Logs.Keep == 0 {
		return workload.DefaultLogKeep
	}
	return spec.Logs.Keep
}

// rotateIn rotates the service log in the runtime dir dir; see
// rotateIfLarge.
func rotateIn(dir string, limit int64, keep int) error {
	root, err := openRuntime(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	return rotateIfLarge(root, logName, limit, keep)
}

// rotateIfLarge rotates path in root once it is larger than limit:
// path.<keep> is dropped, path.<n> becomes path.<n+1>, path is copied to
// path.1 and truncated to zero. root is the service's runtime dir, which
// may be the service's user's: every step goes through it, so a link the
// service left cannot make the supervisor remove, copy or truncate a file
// outside.
//
// Copy-then-truncate rather than rename, because the service holds the
// log open (O_APPEND) and would go on writing to the renamed file; the
// supervisor holds no pipe it could switch over, which is what lets the
// service outlive the agent. The price is a small race: lines the service
// writes between the end of the copy and the truncate are lost. O_APPEND
// makes its next write land at the new end of the file, not at its old
// offset, so no hole of zeros appears.
func rotateIfLarge(root *os.Root, path string, limit int64, keep int) error {
	st, err := root.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Size() <= limit {
		return nil
	}
	for n := keep; n >= 1; n-- {
		from := fmt.Sprintf("%s.%d", path, n)
		if n == keep {
			if err := root.Remove(from); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			continue
		}
		if err := root.Rename(from, fmt.Sprintf("%s.%d", path, n+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := filecopy.InRoot(root, path, path+".1", 0o644); err != nil {
		return err
	}
	f, err := root.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// readLog returns part of the file name in the dir dir and the offset
// just past it: with from < 0 its last n bytes, else up to n bytes from
// offset from, or from the start if the file is shorter than from (a
// rotation truncated it since). n <= 0 or over maxLogRead means
// maxLogRead. A log not yet written is empty. The file is opened through
// an os.Root of dir: a service that made its log a link to a file of the
// agent's does not get that file back.
func readLog(dir, name string, from, n int64) ([]byte, int64, error) {
	if n <= 0 || n > maxLogRead {
		n = maxLogRead
	}
	root, err := openRuntime(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer root.Close()
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	switch {
	case from < 0:
		from = max(size-n, 0)
	case from > size:
		from = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, from, min(size-from, n)))
	return b, from + int64(len(b)), err
}
