package agent

import (
	"time"

	"github.com/nodemgr/nodemgr/internal/base/proto"
)

// contact is what the agent knows of its contact with the server: a server
// that lost touch with this node gives its tasks to others ReclaimAfter
// after it last heard from it. So the agent starts a task it holds only
// while it was heard from recently enough that the server cannot have
// taken it back: a frozen agent (SIGSTOP, a VM paused) that wakes up, or
// one whose server froze, starts nothing until a new welcome has said
// which of its tasks are still its own.
type contact struct {
	peer  *proto.Peer
	since time.Time     // the hello was sent: the server heard from it then
	limit time.Duration // 0: the server does not say; no limit while connected
}

// newContact makes the contact of a welcomed session. An answered ping
// proves the server heard from the agent when it was sent; the agent
// stops starting tasks a keepalive period before the server would take
// them back (for the time between the check and a task's start), and in
// any case once two pings in a row went unanswered, but never sooner: a
// grace shorter than that (tests use such) cannot be kept without
// stalling on every late answer.
func newContact(peer *proto.Peer, helloSent time.Time, reclaimAfter, keepalive time.Duration) *contact {
	limit := max(min(reclaimAfter-keepalive, 3*keepalive), 2*keepalive)
	if reclaimAfter <= 0 {
		limit = 0 // a server that does not say
	}
	return &contact{peer: peer, since: helloSent, limit: limit}
}

// fresh says whether the server has heard from the agent recently enough.
func (t *contact) fresh(now time.Time) bool {
	if t.limit <= 0 {
		return true
	}
	last := t.since
	if c := t.peer.Contact(); c.After(last) {
		last = c
	}
	return now.Sub(last) < t.limit
}

// inTouch says whether the agent may start a task it holds now.
func (a *Agent) inTouch() bool {
	t := a.contact.Load()
	return t != nil && t.fresh(time.Now())
}
