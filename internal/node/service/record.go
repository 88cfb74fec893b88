package service

import (
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/workload"

	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// record is what the supervisor keeps on disk about one service, so that a
// new agent finds its services again: the spec, and enough of the running
// process to recognise it (pid and start time) and to go on applying the
// restart policy (restarts, quick deaths).
type record struct {
	Spec  api.ServiceSpec `json:"spec"`
	State string          `json:"state"`
	PID   int             `json:"pid,omitempty"`
	// StartTime is field 22 of /proc/PID/stat (clock ticks after boot). A
	// pid is recycled by the kernel; pid and start time together are not,
	// so a stranger is never adopted or signalled as the service.
	StartTime   uint64     `json:"start_time,omitempty"`
	Port        int        `json:"port,omitempty"`
	Restarts    int        `json:"restarts"`
	QuickDeaths int        `json:"quick_deaths"` // in a row
	StartedAt   *time.Time `json:"started_at,omitempty"`
	LastExit    string     `json:"last_exit,omitempty"`
	LastExitAt  *time.Time `json:"last_exit_at,omitempty"`
	Reason      string     `json:"reason,omitempty"`
}

const recordExt = ".json"

func recordPath(dir, coord string) string { return filepath.Join(dir, coord+recordExt) }

// writeRecord writes rec atomically (atomicfile): a crash leaves the old
// record or the new one, never a torn one.
func writeRecord(dir string, rec *record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(recordPath(dir, rec.Spec.Coordinate), append(data, '\n'))
}

func removeRecord(dir, coord string) error {
	if err := os.Remove(recordPath(dir, coord)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return atomicfile.SyncDir(dir)
}

// loadRecords reads every record in dir. Temp files a crash left behind are
// removed. A record that cannot be read is reported in bad and skipped, so
// one damaged file does not keep the agent from supervising the others.
func loadRecords(dir string) (recs []*record, bad []error, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if atomicfile.IsTemp(name) {
			os.Remove(path)
			continue
		}
		if e.IsDir() || !strings.HasSuffix(name, recordExt) {
			continue
		}
		rec, err := readRecord(path)
		if err != nil {
			bad = append(bad, fmt.Errorf("service record %s: %w", path, err))
			continue
		}
		recs = append(recs, rec)
	}
	return recs, bad, nil
}

func readRecord(path string) (*record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, err
	}
	if want := strings.TrimSuffix(filepath.Base(path), recordExt); rec.Spec.Coordinate != want {
		return nil, fmt.Errorf("holds coordinate %q, want %q", rec.Spec.Coordinate, want)
	}
	if _, err := workload.ParseCoordinate(rec.Spec.Coordinate); err != nil {
		return nil, err
	}
	return &rec, nil
}
