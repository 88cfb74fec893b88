package hub

import "sync"

// An agent that finds nothing Ready in its suite may leave its tasks.fetch
// parked on the server (api.TasksFetch.WaitMS): the wake that a submit or
// a finished dependency sends is then the claim itself, answered on the
// fetch, instead of a message to the agent and a fetch back. That saves a
// round trip between processes on the path of every task that arrives at
// an idle pool.
//
// A wake must never be lost between the fetch that found nothing and its
// parking: the fetch notes the session's wake count before it claims, and
// parks only if no wake came since; one that did went to the agent as a
// message, as to any fetch not parked.
type parking struct {
	mu    sync.Mutex
	wakes uint64        // wakes so far
	suite string        // the suite of the parked fetch
	ch    chan struct{} // closed when the parked fetch should claim again; nil when none is parked
}

// Wakes is how many wakes reached the session so far: a fetch reads it
// before it claims, to park with.
func (s *Session) Wakes() uint64 {
	s.parking.mu.Lock()
	defer s.parking.mu.Unlock()
	return s.parking.wakes
}

// Park parks a fetch of suite that found nothing: the channel is closed
// by the next wake for the suite. ok is false, and nothing is parked, if
// a wake came since wakes was read, or a fetch is parked already.
// Unpark must follow.
func (s *Session) Park(suite string, wakes uint64) (woken <-chan struct{}, ok bool) {
	p := &s.parking
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wakes != wakes || p.ch != nil {
		return nil, false
	}
	p.suite, p.ch = suite, make(chan struct{})
	return p.ch, true
}

// Unpark ends the parking that returned woken.
func (s *Session) Unpark(woken <-chan struct{}) {
	p := &s.parking
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil && (<-chan struct{})(p.ch) == woken {
		p.suite, p.ch = "", nil
	}
}

// wakeParked counts a wake for suite ("": any) and hands it to the
// session's parked fetch, if one waits on that suite. False: the agent
// must be sent the wake.
func (s *Session) wakeParked(suite string) bool {
	p := &s.parking
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wakes++
	if p.ch == nil || suite != "" && suite != p.suite {
		return false
	}
	close(p.ch)
	p.suite, p.ch = "", nil
	return true
}
