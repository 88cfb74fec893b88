package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
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
type member struct {
	sess    *session // the connection it serves through
	workers int      // its pool's size: its weight
	held    int      // claimed, not yet reported or returned
	askedAt time.Time
}

// share is what fairCap and planGiveback see of a member.
type share struct {
	nodeID  string
	workers int // 0 if not known: counted as 1
	held    int
}

// shares tracks the members of each suite.
type shares struct {
	mu     sync.Mutex
	suites map[string]map[string]*member // suite → node → member
}

// join makes the node a member of the suite through sess; a new connection
// starts its count again.
func (sh *shares) join(suiteID string, sess *session, workers int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.joinLocked(suiteID, sess, workers)
}

func (sh *shares) joinLocked(suiteID string, sess *session, workers int) *member {
	if sh.suites == nil {
		sh.suites = map[string]map[string]*member{}
	}
	ms := sh.suites[suiteID]
	if ms == nil {
		ms = map[string]*member{}
		sh.suites[suiteID] = ms
	}
	m := ms[sess.nodeID]
	if m == nil || m.sess != sess {
		m = &member{sess: sess}
		ms[sess.nodeID] = m
	}
	if workers > 0 {
		m.workers = workers
	}
	return m
}

// leave drops the node from the suite.
func (sh *shares) leave(suiteID, nodeID string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ms := sh.suites[suiteID]; ms != nil {
		delete(ms, nodeID)
		if len(ms) == 0 {
			delete(sh.suites, suiteID)
		}
	}
}

// members joins sess to the suite and returns every member still connected
// through the session it joined with (live says which that is), sess's
// first; it forgets the others. A weight of 0 is not known.
func (sh *shares) members(suiteID string, sess *session, live func(nodeID string) *session) []share {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	me := sh.joinLocked(suiteID, sess, 0)
	out := []share{{sess.nodeID, me.workers, me.held}}
	for id, m := range sh.suites[suiteID] {
		switch {
		case m == me:
		case live(id) != m.sess:
			delete(sh.suites[suiteID], id)
		default:
			out = append(out, share{id, m.workers, m.held})
		}
	}
	return out
}

// prune forgets the members no longer connected through the session they
// joined with: nodes that went away without leaving.
func (sh *shares) prune(live func(nodeID string) *session) {
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

// claimed counts n tasks claimed by the node in the suite.
func (sh *shares) claimed(suiteID string, sess *session, n int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.joinLocked(suiteID, sess, 0).held += n
}

// settled counts n tasks of the node reported or returned, in whichever
// suite it serves (one at a time). It returns the suites where the node
// now holds nothing, and whether it is a member of any.
func (sh *shares) settled(nodeID string, n int, returned bool) (drained []string, member bool) {
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

// suitesOf lists the suites the node is a member of.
func (sh *shares) suitesOf(nodeID string) []string {
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

// ask marks the node asked to give tasks of the suite back, unless it was
// asked within givebackEvery; it returns the session to ask through.
func (sh *shares) ask(suiteID, nodeID string, now time.Time) *session {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m := sh.suites[suiteID][nodeID]
	if m == nil || now.Sub(m.askedAt) < givebackEvery {
		return nil
	}
	m.askedAt = now
	return m.sess
}

// fairShare is member i's share of total unfinished tasks: rounded up, so
// that the shares together cover every task.
func fairShare(total int, all []share, i int) int {
	sum := 0
	for _, m := range all {
		sum += max(1, m.workers)
	}
	w := max(1, all[i].workers)
	return (total*w + sum - 1) / sum
}

// fairCap is how many tasks all[0] may claim of the want it asked for, with
// total tasks Ready or Running in the suite: up to its fair share, and never
// less than its idle workers need.
func fairCap(total, want int, all []share) int {
	me := all[0]
	allowed := max(fairShare(total, all, 0)-me.held, max(1, me.workers)-me.held, 0)
	return min(want, allowed)
}

// planGiveback says, for all[0] which found no task Ready, how many tasks
// each member that holds more than its share should give back: together
// up to what all[0] lacks of its own share, the largest excess first.
func planGiveback(total int, all []share) map[string]int {
	lack := fairShare(total, all, 0) - all[0].held
	if lack <= 0 {
		return nil
	}
	type excess struct {
		nodeID string
		n      int
	}
	var over []excess
	for i, m := range all[1:] {
		if n := m.held - fairShare(total, all, i+1); n > 0 {
			over = append(over, excess{m.nodeID, n})
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

// joinWouldGet says whether the node, with its workers, would be given
// tasks back if it joined the suite now, with total tasks Ready or Running
// there: see unstartedExcess. Members no longer connected through the
// session they joined with are left out (members forgets them later).
func (sh *shares) joinWouldGet(suiteID, nodeID string, workers, total int, live func(nodeID string) *session) bool {
	sh.mu.Lock()
	all := []share{{nodeID, workers, 0}}
	for id, m := range sh.suites[suiteID] {
		if id != nodeID && live(id) == m.sess {
			all = append(all, share{id, m.workers, m.held})
		}
	}
	sh.mu.Unlock()
	return unstartedExcess(total, all)
}

// unstartedExcess says whether some member of all but all[0] holds more
// than its share and more than its workers run at once: tasks it has
// surely not started, which it would give back to all[0]. A member that
// holds no more than its workers may be running all of them.
func unstartedExcess(total int, all []share) bool {
	for i, m := range all[1:] {
		if m.held > fairShare(total, all, i+1) && m.held > max(1, m.workers) {
			return true
		}
	}
	return false
}
