package dispatch

import (
	"sync"
	"time"
)

// moveCheckEvery bounds how often one node's fetches in one suite look at
// the other suites.
const moveCheckEvery = time.Second

// FetchWatch remembers, per (suite, node), since when fetches found
// nothing and when the other suites were last looked at; the zero value
// is ready.
type FetchWatch struct {
	mu         sync.Mutex
	emptySince map[[2]string]time.Time
	checked    map[[2]string]time.Time
}

// NoteClaim records how many tasks a fetch claimed.
func (w *FetchWatch) NoteClaim(suiteID, nodeID string, claimed int) {
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

// Due says whether it is time to look at the other suites again, and how
// long the node has found nothing in this one.
func (w *FetchWatch) Due(suiteID, nodeID string) (bool, time.Duration) {
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

// Recheck makes the next fetch of every node in the suite (or, with
// suiteID "", in any suite) look again at once: its assignment changed,
// or a node's tags or groups did.
func (w *FetchWatch) Recheck(suiteID, nodeID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.checked {
		if (suiteID == "" || key[0] == suiteID) && (nodeID == "" || key[1] == nodeID) {
			delete(w.checked, key)
		}
	}
}

// Forget drops what is remembered of a node in a suite it left.
func (w *FetchWatch) Forget(suiteID, nodeID string) {
	key := [2]string{suiteID, nodeID}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.emptySince, key)
	delete(w.checked, key)
}
