package dispatch

import (
	"sync"
	"time"
)

// PrepareBackoff is how long a node that failed to prepare a suite is
// not offered that suite again.
const PrepareBackoff = 5 * time.Minute

// PrepareFailures remembers which nodes failed to prepare which suites,
// and when; the zero value is ready.
type PrepareFailures struct {
	mu sync.Mutex
	at map[[2]string]time.Time // (suite, node) → when
}

// Note records that nodeID failed to prepare suiteID now.
func (p *PrepareFailures) Note(suiteID, nodeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[[2]string]time.Time{}
	}
	p.at[[2]string{suiteID, nodeID}] = time.Now()
}

// Clear forgets that nodeID failed to prepare suiteID: it ran it since.
func (p *PrepareFailures) Clear(suiteID, nodeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.at, [2]string{suiteID, nodeID})
}

// Recently reports whether nodeID failed to prepare suiteID within
// PrepareBackoff.
func (p *PrepareFailures) Recently(suiteID, nodeID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.at[[2]string{suiteID, nodeID}]
	return ok && time.Since(at) < PrepareBackoff
}
