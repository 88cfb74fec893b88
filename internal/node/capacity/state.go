package capacity

import (
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"

	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nodemgr/nodemgr/api"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// fileState is the state file: the books, allocations oldest first and
// commitments soonest to expire first, so the file reads well.
type fileState struct {
	Version     int              `json:"version"`
	Onboarding  api.Onboarding   `json:"onboarding"`
	Commitments []api.Commitment `json:"commitments"`
	Allocations []api.Allocation `json:"allocations"`
}

// save writes the books to the state file, if there is one. l.mu is held,
// so the file changes in the same order as the books.
func (l *Ledger) save() error {
	if l.path == "" {
		return nil
	}
	st := fileState{
		Version:     stateVersion,
		Onboarding:  l.onboarding,
		Commitments: l.sortedCommitments(),
		Allocations: l.sortedAllocations(),
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		err = atomicfile.Write(l.path, append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("save the books to %s: %w", l.path, err)
	}
	return nil
}

// restore loads checked state into empty books.
func (l *Ledger) restore(st fileState) {
	l.onboarding = st.Onboarding
	l.offered = toAmount(st.Onboarding.Offered)
	for _, c := range st.Commitments {
		l.addCommitment(c)
	}
	for _, a := range st.Allocations {
		l.addAllocation(a)
	}
}

// loadState reads the state file at path; found is false if there is none.
func loadState(path string) (fileState, bool, error) {
	return atomicfile.ReadState[fileState](path, "capacity state", corrupt)
}

func corrupt(path, why string) error {
	return fmt.Errorf("capacity state file %s is corrupt (%s): fix it, or move it away and restart the agent; "+
		"the node then starts offboarded with empty books: onboard it again (`nodemgr node onboard NODE --share 50`), "+
		"and restart the workloads that still run so that they are booked", path, why)
}

// check validates a state read from the file: what Allocate and Commit
// would have refused must not come back through the file either.
func (st *fileState) Check() error {
	if st.Version != stateVersion {
		return fmt.Errorf("version is %d, want %d", st.Version, stateVersion)
	}
	if o := st.Onboarding; o.Onboarded && (o.SharePercent < MinShare || o.SharePercent > MaxShare) {
		return fmt.Errorf("onboarding: share_percent %d is not between %d and %d", o.SharePercent, MinShare, MaxShare)
	}
	if err := checkResources(st.Onboarding.Offered); err != nil {
		return fmt.Errorf("onboarding.offered: %w", err)
	}
	ports := make(map[int]string)
	takePorts := func(field string, list []int) error {
		if err := checkPorts(list); err != nil {
			return err
		}
		for _, p := range list {
			if other, dup := ports[p]; dup {
				return fmt.Errorf("port %d is also held by %s", p, other)
			}
			ports[p] = field
		}
		return nil
	}
	ids := make(map[string]bool)
	for i, c := range st.Commitments {
		field := fmt.Sprintf("commitments[%d]", i)
		if err := checkEntry(ids, c.ID, c.Resources); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if err := takePorts(field, c.Ports); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	gpus := make(map[int]string)
	for i, a := range st.Allocations {
		field := fmt.Sprintf("allocations[%d]", i)
		if err := checkEntry(ids, a.ID, a.Resources); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		switch a.Kind {
		case api.AllocationPool, api.AllocationService, api.AllocationContainer:
		default:
			return fmt.Errorf("%s: kind %q is unknown", field, a.Kind)
		}
		if err := takePorts(field, a.Ports); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if len(a.GPUIndexes) != a.GPUs {
			return fmt.Errorf("%s: gpus is %d but gpu_indexes lists %d", field, a.GPUs, len(a.GPUIndexes))
		}
		for _, g := range a.GPUIndexes {
			if other, dup := gpus[g]; dup {
				return fmt.Errorf("%s: GPU %d is also held by %s", field, g, other)
			}
			gpus[g] = field
		}
	}
	return nil
}

// checkEntry checks an allocation's or commitment's ID and resources.
func checkEntry(ids map[string]bool, id string, r api.Resources) error {
	if id == "" {
		return errors.New("id is missing")
	}
	if ids[id] {
		return fmt.Errorf("id %s is listed twice", id)
	}
	ids[id] = true
	return checkResources(r)
}

func dirOf(path string) string { return filepath.Dir(path) }
