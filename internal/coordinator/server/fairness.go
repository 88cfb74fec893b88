package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
)

// A node works on one suite at a time, and tasks.fetch is where the
// server tells it to move on (api.TasksFetched.Yield), when
//
//   - the suite is no longer the node's to run: it was assigned to other
//     nodes, or the node's tags or groups changed;
//   - a suite of higher priority has tasks ready that the node may run;
//   - it found nothing to run in its suite for IdleSuiteGrace while
//     another suite has tasks ready for it.
//
// The node finishes what it holds, leaves, and asks for the next suite,
// which is the highest-priority one with work; it comes back when this
// one has work again and nothing more urgent waits.

// moveCheckEvery bounds how often one node's fetches in one suite look at
// the other suites.
const moveCheckEvery = time.Second

// fetchWatch remembers, per (suite, node), since when fetches found
// nothing and when the other suites were last looked at.
type fetchWatch struct {
	mu         sync.Mutex
	emptySince map[[2]string]time.Time
	checked    map[[2]string]time.Time
}

// noteClaim records how many tasks a fetch claimed.
func (w *fetchWatch) noteClaim(suiteID, nodeID string, claimed int) {
	key := [2]string{suiteID, nodeID}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.emptySince == nil {
		w.emptySince = map[[2]string]time.Time{}
	}
	if claimed > 0 {
		delete(w.emptySince, key)
	} else if _, ok := w.emptySince[key]; !ok {
		w.emptySince[key] = time.Now()
	}
}

// due says whether it is time to look at the other suites again, and how
// long the node has found nothing in this one.
func (w *fetchWatch) due(suiteID, nodeID string) (bool, time.Duration) {
	key := [2]string{suiteID, nodeID}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checked == nil {
		w.checked = map[[2]string]time.Time{}
	}
	if now.Sub(w.checked[key]) < moveCheckEvery {
		return false, 0
	}
	w.checked[key] = now
	var idle time.Duration
	if since, ok := w.emptySince[key]; ok {
		idle = now.Sub(since)
	}
	return true, idle
}

// recheck makes the next fetch of every node in the suite (or, with
// suiteID "", in any suite) look again at once: its assignment changed,
// or a node's tags or groups did.
func (w *fetchWatch) recheck(suiteID, nodeID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.checked {
		if (suiteID == "" || key[0] == suiteID) && (nodeID == "" || key[1] == nodeID) {
			delete(w.checked, key)
		}
	}
}

// forget drops what is remembered of a node in a suite it left.
func (w *fetchWatch) forget(suiteID, nodeID string) {
	key := [2]string{suiteID, nodeID}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.emptySince, key)
	delete(w.checked, key)
}

// notThisNodes is the answer to a node that may no longer claim a suite's
// tasks.
const notThisNodes = "the suite is no longer this node's to run: it is assigned to other nodes, or the node's tags or groups changed"

// moveOn says why the node should leave the suite instead of claiming
// more of its tasks, or "" when it should stay.
func (s *Server) moveOn(ctx context.Context, suiteID, nodeID string) (string, error) {
	due, idle := s.dispatch.fetches.due(suiteID, nodeID)
	if !due {
		return "", nil
	}
	su, err := s.store.GetSuite(ctx, suiteID)
	if err != nil {
		return "", err
	}
	n, err := s.store.GetNode(ctx, nodeID)
	if err != nil {
		return "", err
	}
	if dispatch.Placement(su, n) != nil {
		return notThisNodes, nil
	}
	next, err := s.nextSuite(ctx, nodeID)
	if err != nil || next == nil || next.ID == suiteID {
		return "", err
	}
	switch {
	case next.Spec.Priority > su.Spec.Priority:
		return fmt.Sprintf("suite %s of higher priority (%d > %d) has tasks ready", next.Spec.Name, next.Spec.Priority, su.Spec.Priority), nil
	case idle >= s.cfg.IdleSuiteGrace:
		return fmt.Sprintf("nothing to run here for %s while suite %s has tasks ready", idle.Round(time.Second), next.Spec.Name), nil
	}
	return "", nil
}
