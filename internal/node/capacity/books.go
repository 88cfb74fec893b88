package capacity

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// expire drops the commitments whose time is up and returns how many. The
// caller's save writes their release. l.mu is held.
func (l *Ledger) expire() int {
	if len(l.commitments) == 0 {
		return 0
	}
	now, n := l.now(), 0
	for id, c := range l.commitments {
		if !now.Before(c.ExpiresAt) {
			l.removeCommitment(id)
			l.unlockPorts(c, true) // clients told of the port may still knock
			n++
		}
	}
	return n
}

// addAllocation, removeAllocation, addCommitment and removeCommitment are
// the only changes to the books: they keep the sums, ports and GPUs in step.
// l.mu is held, and each is the exact undo of its pair.

func (l *Ledger) addAllocation(a api.Allocation) {
	l.allocations[a.ID] = a
	l.allocated = l.allocated.add(toAmount(a.Resources))
	for _, p := range a.Ports {
		l.ports[p] = holder{"allocation", a.ID}
	}
	for _, i := range a.GPUIndexes {
		l.gpus[i] = a.ID
	}
}

func (l *Ledger) removeAllocation(id string) {
	a := l.allocations[id]
	delete(l.allocations, id)
	l.allocated = l.allocated.sub(toAmount(a.Resources))
	for _, p := range a.Ports {
		delete(l.ports, p)
	}
	for _, i := range a.GPUIndexes {
		delete(l.gpus, i)
	}
}

func (l *Ledger) addCommitment(c api.Commitment) {
	l.commitments[c.ID] = c
	l.committed = l.committed.add(toAmount(c.Resources))
	for _, p := range c.Ports {
		l.ports[p] = holder{"commitment", c.ID}
	}
}

func (l *Ledger) removeCommitment(id string) {
	c := l.commitments[id]
	delete(l.commitments, id)
	l.committed = l.committed.sub(toAmount(c.Resources))
	for _, p := range c.Ports {
		delete(l.ports, p)
	}
}

// notify calls the test hook after a change. l.mu is held.
func (l *Ledger) notify() {
	if l.changed != nil {
		l.changed()
	}
}

// unusedID returns a new random ID with prefix that neither an allocation
// nor a commitment has. l.mu is held.
func (l *Ledger) unusedID(prefix string) string {
	for {
		b := make([]byte, 6)
		rand.Read(b)
		id := prefix + hex.EncodeToString(b)
		_, a := l.allocations[id]
		_, c := l.commitments[id]
		if !a && !c {
			return id
		}
	}
}

// sortedAllocations returns the allocations oldest first, never nil (JSON
// [] rather than null). l.mu is held.
func (l *Ledger) sortedAllocations() []api.Allocation {
	list := slices.AppendSeq(make([]api.Allocation, 0, len(l.allocations)), maps.Values(l.allocations))
	slices.SortFunc(list, func(x, y api.Allocation) int {
		return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), strings.Compare(x.ID, y.ID))
	})
	return list
}

// sortedCommitments returns the commitments, soonest to expire first.
// l.mu is held.
func (l *Ledger) sortedCommitments() []api.Commitment {
	list := slices.AppendSeq(make([]api.Commitment, 0, len(l.commitments)), maps.Values(l.commitments))
	slices.SortFunc(list, func(x, y api.Commitment) int {
		return cmp.Or(x.ExpiresAt.Compare(y.ExpiresAt), strings.Compare(x.ID, y.ID))
	})
	return list
}

// cloneAllocation copies a's slices, so callers cannot change the books.
func cloneAllocation(a api.Allocation) api.Allocation {
	a.Ports, a.GPUIndexes = slices.Clone(a.Ports), slices.Clone(a.GPUIndexes)
	return a
}

func cloneCommitment(c api.Commitment) api.Commitment {
	c.Ports = slices.Clone(c.Ports)
	return c
}
