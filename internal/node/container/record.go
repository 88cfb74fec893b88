package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// recordVersion is the version of a record file's format.
const recordVersion = 1

// record is one job's file, <StateDir>/<id>.json. It holds what an agent
// restart needs to find the job's container again and to book its ports;
// the usage sample is left out, being stale by the time it would be read.
type record struct {
	Version   int           `json:"version"`
	Container api.Container `json:"container"`
}

const recordExt = ".json"

func recordPath(dir, id string) string { return filepath.Join(dir, id+recordExt) }

// saveRecord writes c's record atomically: to a temporary file that is
// synced and renamed into place, so that a crash leaves the old record or
// the new one, never a torn one.
func saveRecord(dir string, c api.Container) error {
	c.Usage = nil
	b, err := json.MarshalIndent(record{Version: recordVersion, Container: c}, "", "  ")
	if err != nil {
		return fmt.Errorf("save record of job %s: %w", c.Job.ID, err)
	}
	if err := atomicfile.Write(recordPath(dir, c.Job.ID), append(b, '\n')); err != nil {
		return fmt.Errorf("save record of job %s: %w", c.Job.ID, err)
	}
	return nil
}

func removeRecord(dir, id string) error {
	err := os.Remove(recordPath(dir, id))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove record of job %s: %w", id, err)
	}
	return nil
}

// loadRecords reads every record in dir. A record that cannot be read is
// reported in bad and skipped, so that one damaged file does not keep the
// agent from managing the other jobs.
func loadRecords(dir string) (recs []api.Container, bad []error, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read container records in %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if atomicfile.IsTemp(name) && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, name)) // left by a crash in atomicfile.Write
			continue
		}
		if !strings.HasSuffix(name, recordExt) || !e.Type().IsRegular() {
			continue
		}
		c, err := loadRecord(filepath.Join(dir, name), strings.TrimSuffix(name, recordExt))
		if err != nil {
			bad = append(bad, err)
			continue
		}
		recs = append(recs, c)
	}
	return recs, bad, nil
}

func loadRecord(path, id string) (api.Container, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return api.Container{}, fmt.Errorf("read container record: %w", err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return api.Container{}, corrupt(path, err.Error())
	}
	switch {
	case r.Version != recordVersion:
		return api.Container{}, corrupt(path, fmt.Sprintf("version is %d, want %d", r.Version, recordVersion))
	case r.Container.Job.ID != id:
		return api.Container{}, corrupt(path, fmt.Sprintf("it holds job %q", r.Container.Job.ID))
	case r.Container.Status == "":
		return api.Container{}, corrupt(path, "it has no status")
	}
	r.Container.Status = api.ContainerStatus(r.Container.Status) // written before one casing of states
	return r.Container, nil
}

func corrupt(path, why string) error {
	return fmt.Errorf("container record %s is unusable (%s): move it away; its container, if any, carries the label %s and can be removed with docker rm -f",
		path, why, workload.LabelJob)
}
