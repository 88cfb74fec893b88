package portalloc

import (
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"

	"encoding/json"
	"fmt"
	"slices"
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
	if err := atomicfile.Write(a.path, append(b, '\n')); err != nil {
		return fmt.Errorf("save port state %s: %w", a.path, err)
	}
	return nil
}

// loadState reads the state file at path; found is false if there is none.
func loadState(path string) (fileState, bool, error) {
	return atomicfile.ReadState[fileState](path, "port state", corrupt)
}

func corrupt(path, why string) error {
	return fmt.Errorf("port state file %s is corrupt (%s): move it away and restart; "+
		"the allocator then starts with no ports held and still skips the ports that running workloads use", path, why)
}

// check validates a state read from the file.
func (st *fileState) Check() error {
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
