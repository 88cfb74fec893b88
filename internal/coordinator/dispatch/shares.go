package dispatch

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fair shares.
//
// Every agent's pool keeps a prefetch buffer (32 by default) so that its
// workers never wait on a round trip. Alone on a big suite that is right;
// with several agents on a suite of a few dozen tasks, the first to fetch
// would take nearly all of them and leave the others idle. So while two or
// more nodes serve a suite, a fetch is capped at the node's fair share of
// the suite's unfinished tasks (Ready + Running):
//
//	share(n)   = ⌈(ready + running) · workers(n) / Σ workers⌉
//	allowed(n) = max(share(n) − held(n), workers(n) − held(n))
//
// where held(n) is what n claimed and has not reported or returned yet
// (buffered or running there). The second term means a node is never held
// back from work for its own idle workers while tasks are Ready: the cap
// trims buffers, never throughput. With many tasks the share is far above
// any buffer and the cap does not bind; with one node serving the suite it
// is not even computed, so the single-agent path costs nothing extra.
//
// Caps alone cannot undo an earlier claim: a node that came first, or whose
// tasks run faster, may still hold tasks unstarted when another runs out.
// Then the server asks the holders of more than their share to give the
// excess back (api.MethodTasksGiveback), at most once a givebackEvery per
// holder; their pools return unstarted tasks (buffered, then those queued
// to workers behind the one they run) with tasks.return, and the server
// wakes the suite's other nodes to claim them.
//
// A node that comes when every task of the suite is claimed finds none
// Ready, yet it should still take the suite up: the holders give it its
// share as soon as it fetches. So suite.next also offers a suite with
// nothing Ready where a member holds more than its share with the node
// counted in, and more than its workers can be running (so some of it is
// surely unstarted): see joinWouldGet. Without this, a 0→2 pool's second
// machine idled while the first ran all 8 tasks it had prefetched.
//
// Members are the nodes that took the suite with suite.next or fetched from
// it, over their current connection, and have not left it. This is the
// view of one server: with replicas, each sees the agents connected to it.
// held is counted here and errs low (a report or return that did not apply
// still counts down, a new connection starts again from 0), which only
// loosens the cap: it never holds a node back from tasks it should have.

// givebackEvery bounds how often one holder is asked to give tasks back:
// its tasks.return answers sooner, and a holder with nothing unstarted
// (answering 0) is not asked again at once.
const givebackEvery = time.Second

// member is a node serving a suite.
type member[S comparable] struct {
	sess    S   // the connection it serves through
	workers int // its pool's size: its weight
	held    int // claimed, not yet reported or returned
	askedAt time.Time
}

// Share is what FairCap and PlanGiveback see of a member.
type Share struct {
	NodeID  string
	Workers int // 0 if not known: counted as 1
	Held    int
}

// Shares tracks the members of each suite, each through the session S
// (a connection) it joined with; the zero value is ready.
type Shares[S comparable] struct {
	mu     sync.Mutex
	suites map[string]map[string]*member[S] // suite → node → member
}

// Join makes the node a member of the suite through sess; a new
// connection starts its count again.
func (sh *Shares[S]) Join(suiteID, nodeID string, sess S, workers int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.joinLocked(suiteID, nodeID, sess, workers)
}

func (sh *Shares[S]) joinLocked(suiteID, nodeID string, sess S, workers int) *member[S] {
	if sh.suites == nil {
		sh.suites = map[string]map[string]*member[S]{}
	}
	ms := sh.suites[suiteID]
	if ms == nil {
		ms = map[string]*member[S]{}
		sh.suites[suiteID] = ms
	}
	m := ms[nodeID]
	if m == nil || m.sess != sess {
		m = &member[S]{sess: sess}
		ms[nodeID] = m
	}
	if workers > 0 {
		m.workers = workers
	}
	return m
}

// Leave drops the node from the suite.
func (sh *Shares[S]) Leave(suiteID, nodeID string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ms := sh.suites[suiteID]; ms != nil {
		delete(ms, nodeID)
		if len(ms) == 0 {
			delete(sh.suites, suiteID)
		}
	}
}

// Members joins the node to the suite through sess and returns every
// member still connected through the session it joined with (live says
// which that is), the node's first; it forgets the others. A weight of 0
// is not known.
func (sh *Shares[S]) Members(suiteID, nodeID string, sess S, live func(nodeID string) S) []Share {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	me := sh.joinLocked(suiteID, nodeID, sess, 0)
	out := []Share{{nodeID, me.workers, me.held}}
	for id, m := range sh.suites[suiteID] {
		switch {
		case m == me:
		case live(id) != m.sess:
			delete(sh.suites[suiteID], id)
		default:
			out = append(out, Share{id, m.workers, m.held})
		}
	}
	return out
}

// Prune forgets the members no longer connected through the session they
// joined with: nodes that went away without leaving.
func (sh *Shares[S]) Prune(live func(nodeID string) S) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for suiteID, ms := range sh.suites {
		for id, m := range ms {
			if live(id) != m.sess {
				delete(ms, id)
			}
		}
		if len(ms) == 0 {
			delete(sh.suites, suiteID)
		}
	}
}

// Claimed counts n tasks claimed by the node in the suite.
func (sh *Shares[S]) Claimed(suiteID, nodeID string, sess S, n int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.joinLocked(suiteID, nodeID, sess, 0).held += n
}

// Settled counts n tasks of the node reported or returned, in whichever
// suite it serves (one at a time). It returns the suites where the node
// now holds nothing, and whether it is a member of any.
func (sh *Shares[S]) Settled(nodeID string, n int, returned bool) (drained []string, member bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for suiteID, ms := range sh.suites {
		if m := ms[nodeID]; m != nil {
			member = true
			m.held = max(0, m.held-n)
			if returned {
				m.askedAt = time.Time{}
			}
			if m.held == 0 {
				drained = append(drained, suiteID)
			}
		}
	}
	return drained, member
}

// SuitesOf lists the suites the node is a member of.
func (sh *Shares[S]) SuitesOf(nodeID string) []string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var ids []string
	for suiteID, ms := range sh.suites {
		if ms[nodeID] != nil {
			ids = append(ids, suiteID)
		}
	}
	return ids
}

// Ask marks the node asked to give tasks of the suite back, unless it was
// asked within givebackEvery; it returns the session to ask through, and
// false when there is none to ask now.
func (sh *Shares[S]) Ask(suiteID, nodeID string, now time.Time) (S, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.suites[suiteID][nodeID]
	if m == nil || now.Sub(m.askedAt) < givebackEvery {
		var none S
		return none, false
	}
	m.askedAt = now
	return m.sess, true
}

// fairShare is member i's share of total unfinished tasks: rounded up, so
// that the shares together cover every task.
func fairShare(total int, all []Share, i int) int {
	sum := 0
	for _, m := range all {
		sum += max(1, m.Workers)
	}
	w := max(1, all[i].Workers)
	return (total*w + sum - 1) / sum
}

// FairCap is how many tasks all[0] may claim of the want it asked for, with
// total tasks Ready or Running in the suite: up to its fair share, and never
// less than its idle workers need.
func FairCap(total, want int, all []Share) int {
	me := all[0]
	allowed := max(fairShare(total, all, 0)-me.Held, max(1, me.Workers)-me.Held, 0)
	return min(want, allowed)
}

// PlanGiveback says, for all[0] which found no task Ready, how many tasks
// each member that holds more than its share should give back: together
// up to what all[0] lacks of its own share, the largest excess first.
func PlanGiveback(total int, all []Share) map[string]int {
	lack := fairShare(total, all, 0) - all[0].Held
	if lack <= 0 {
		return nil
	}
	type excess struct {
		nodeID string
		n      int
	}
	var over []excess
	for i, m := range all[1:] {
		if n := m.Held - fairShare(total, all, i+1); n > 0 {
			over = append(over, excess{m.NodeID, n})
		}
	}
	slices.SortFunc(over, func(a, b excess) int { return cmp.Or(b.n-a.n, strings.Compare(a.nodeID, b.nodeID)) })
	plan := map[string]int{}
	for _, o := range over {
		if lack <= 0 {
			break
		}
		n := min(o.n, lack)
		plan[o.nodeID] = n
		lack -= n
	}
	return plan
}

// JoinWouldGet says whether the node, with its workers, would be given
// tasks back if it joined the suite now, with total tasks Ready or Running
// there: see unstartedExcess. Members no longer connected through the
// session they joined with are left out (Members forgets them later).
func (sh *Shares[S]) JoinWouldGet(suiteID, nodeID string, workers, total int, live func(nodeID string) S) bool {
	sh.mu.Lock()
	all := []Share{{nodeID, workers, 0}}
	for id, m := range sh.suites[suiteID] {
		if id != nodeID && live(id) == m.sess {
			all = append(all, Share{id, m.workers, m.held})
		}
	}
	sh.mu.Unlock()
	return unstartedExcess(total, all)
}

// unstartedExcess says whether some member of all but all[0] holds more
// than its share and more than its workers run at once: tasks it has
// surely not started, which it would give back to all[0]. A member that
// holds no more than its workers may be running all of them.
func unstartedExcess(total int, all []Share) bool {
	for i, m := range all[1:] {
		if m.Held > fairShare(total, all, i+1) && m.Held > max(1, m.Workers) {
			return true
		}
	}
	return false
}
