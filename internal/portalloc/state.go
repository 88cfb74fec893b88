package portalloc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// fileState is the state file: the held ports and those in quarantine, each
// sorted by port so that the file reads well and diffs cleanly.
type fileState struct {
	Version    int           `json:"version"`
	Held       []heldPort    `json:"held"`
	Quarantine []restingPort `json:"quarantine"`
}

type heldPort struct {
	Port  int    `json:"port"`
	Owner string `json:"owner"`
}

type restingPort struct {
	Port  int       `json:"port"`
	Owner string    `json:"owner"` // who released it
	Until time.Time `json:"until"`
}

// snapshot returns the state as it is written to the file. a.mu is held.
func (a *Allocator) snapshot() fileState {
	st := fileState{
		Version:    stateVersion,
		Held:       make([]heldPort, 0, len(a.held)),
		Quarantine: make([]restingPort, 0, len(a.resting)),
	}
	for p, o := range a.held {
		st.Held = append(st.Held, heldPort{Port: p, Owner: o})
	}
	for p, r := range a.resting {
		st.Quarantine = append(st.Quarantine, restingPort{Port: p, Owner: r.owner, Until: r.until})
	}
	slices.SortFunc(st.Held, func(x, y heldPort) int { return x.Port - y.Port })
	slices.SortFunc(st.Quarantine, func(x, y restingPort) int { return x.Port - y.Port })
	return st
}

// save writes the state file, if there is one. a.mu is held: the file
// changes in the same order as the state in memory.
func (a *Allocator) save() error {
	if a.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(a.snapshot(), "", "  ")
	if err != nil {
		return fmt.Errorf("save port state %s: %w", a.path, err)
	}
	if err := writeFileAtomic(a.path, append(b, '\n')); err != nil {
		return fmt.Errorf("save port state %s: %w", a.path, err)
	}
	return nil
}

// loadState reads the state file at path; found is false if there is none.
func loadState(path string) (st fileState, found bool, err error) {
	removeStaleTemps(path)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return st, false, fmt.Errorf("port state: %w", err)
		}
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read port state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, true, corrupt(path, err.Error())
	}
	if err := st.check(); err != nil {
		return st, true, corrupt(path, err.Error())
	}
	return st, true, nil
}

func corrupt(path, why string) error {
	return fmt.Errorf("port state file %s is corrupt (%s): move it away and restart; "+
		"the allocator then starts with no ports held and still skips the ports that running workloads use", path, why)
}

// check validates a state read from the file.
func (st fileState) check() error {
	if st.Version != stateVersion {
		return fmt.Errorf("version is %d, want %d", st.Version, stateVersion)
	}
	seen := make(map[int]string, len(st.Held)+len(st.Quarantine))
	checkPort := func(field string, port int, owner string) error {
		if port < 1 || port > 65535 {
			return fmt.Errorf("%s: %d is not a port number", field, port)
		}
		if err := checkOwner(owner); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if other, dup := seen[port]; dup {
			return fmt.Errorf("%s: port %d is listed twice (also %s)", field, port, other)
		}
		seen[port] = field
		return nil
	}
	for i, h := range st.Held {
		if err := checkPort(fmt.Sprintf("held[%d]", i), h.Port, h.Owner); err != nil {
			return err
		}
	}
	for i, q := range st.Quarantine {
		field := fmt.Sprintf("quarantine[%d]", i)
		if err := checkPort(field, q.Port, q.Owner); err != nil {
			return err
		}
		if q.Until.IsZero() {
			return fmt.Errorf("%s: until is missing", field)
		}
	}
	return nil
}

// writeFileAtomic replaces path with data: it writes a temporary file next to
// it, syncs it, renames it into place and syncs the directory, so a crash
// leaves either the old file or the new one, never a torn one.
func writeFileAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, tempPrefix(base)+"*") // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func tempPrefix(base string) string { return "." + base + ".tmp-" }

// removeStaleTemps removes temporary files that a crash in writeFileAtomic
// left behind. Only one allocator uses a state file (the agent locks its data
// dir), so none of them is being written.
func removeStaleTemps(path string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix(base)) && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
