package ui

import (
	"context"
	"encoding/json"
	"math"
	"net/url"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// event is one Server-Sent Event. Ids grow by one per event within a
// session's feed, so a gap is a lost event and a client can say exactly
// where it stopped (Last-Event-ID).
type event struct {
	ID   uint64
	Type string // node, suite, rate, session
	Data []byte // JSON
}

// Bounds of a feed.
const (
	feedRing      = 2048             // events kept for streams that resume
	feedIdle      = time.Minute      // a feed nobody watched this long stops polling
	feedNodeLimit = 500              // nodes polled: the first page's worth
	feedRateSpan  = 30 * time.Second // the dispatch rate's window
)

// feed turns a poll of the API, as one session's token sees it, into
// events: what changed since the last poll. It polls only while a stream
// watches or a page was rendered a moment ago; stopped, it keeps what it
// saw, so the next poll still reports every change, coalesced.
type feed struct {
	c     caller
	every time.Duration
	now   func() time.Time

	mu       sync.Mutex
	ring     []event // the newest feedRing events, oldest first
	last     uint64  // id of the newest event
	changed  chan struct{}
	nodes    map[string]nodeEvent
	suites   map[string]suiteEvent
	done     []doneSample // (time, tasks ended) for the rate
	running  bool
	watchers int
	usedAt   time.Time
	closed   bool
	quit     chan struct{}
	polled   bool // the first poll (the baseline) is done
	rateSent bool
	lastRate float64
}

// nodeEvent is what a page shows of a node live.
type nodeEvent struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	AgentState string `json:"agent_state,omitempty"`
}

// suiteEvent is what a page shows of a suite live.
type suiteEvent struct {
	ID      string         `json:"id"`
	Name    string         `json:"name"`
	State   string         `json:"state"`
	Counts  api.TaskCounts `json:"counts"`
	Total   int            `json:"total"`
	Percent int            `json:"percent"` // of tasks ended
}

type doneSample struct {
	at   time.Time
	done int
}

func newFeed(c caller, every time.Duration, now func() time.Time) *feed {
	return &feed{c: c, every: every, now: now, changed: make(chan struct{}),
		nodes: map[string]nodeEvent{}, suites: map[string]suiteEvent{}, quit: make(chan struct{})}
}

// touch says a page was rendered: the feed starts polling if it was not
// (after one poll now, the baseline the page was rendered against) and
// returns the id the page's stream should start after.
func (f *feed) touch(ctx context.Context) uint64 {
	f.mu.Lock()
	f.usedAt = f.now()
	needBaseline := !f.polled
	f.mu.Unlock()
	if needBaseline {
		f.poll(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startLocked()
	return f.last
}

func (f *feed) startLocked() {
	if f.running || f.closed {
		return
	}
	f.running = true
	go f.loop()
}

// maxWatchers bounds the streams of one session (its tabs): each holds a
// connection and a goroutine.
const maxWatchers = 32

// watch registers a stream; the returned func unregisters it. It returns
// false when the session has maxWatchers streams already.
func (f *feed) watch() (func(), bool) {
	f.mu.Lock()
	if f.watchers >= maxWatchers {
		f.mu.Unlock()
		return nil, false
	}
	f.watchers++
	f.usedAt = f.now()
	f.startLocked()
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.watchers--
		f.usedAt = f.now()
		f.mu.Unlock()
	}, true
}

// since returns the events after id and a channel closed when more come.
// lost says events after id were dropped from the ring: the client must
// reload what it shows.
func (f *feed) since(id uint64) (evs []event, lost bool, more <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id > f.last {
		// An id from before a server restart or from another session.
		return nil, true, f.changed
	}
	if len(f.ring) > 0 && id+1 < f.ring[0].ID {
		return nil, true, f.changed
	}
	for _, e := range f.ring {
		if e.ID > id {
			evs = append(evs, e)
		}
	}
	return evs, false, f.changed
}

func (f *feed) lastID() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// stop ends the feed for good (its session ended). A nil feed is stopped.
func (f *feed) stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.quit)
	}
}

func (f *feed) loop() {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-f.quit:
			return
		case <-t.C:
		}
		if f.idle() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		f.poll(ctx)
		cancel()
	}
}

// idle stops the loop when nobody watches and no page was shown lately.
func (f *feed) idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watchers == 0 && f.now().Sub(f.usedAt) > feedIdle {
		f.running = false
		return true
	}
	return false
}

// setToken makes the feed poll with a renewed session's token.
func (f *feed) setToken(token string) {
	f.mu.Lock()
	f.c.token = token
	f.mu.Unlock()
}

func (f *feed) caller() caller {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c
}

// poll reads the nodes and the live suites and publishes what changed.
func (f *feed) poll(ctx context.Context) {
	c := f.caller()
	var nl api.NodeList
	nodeErr := c.get(ctx, "/v1/nodes", url.Values{"limit": {itoa(feedNodeLimit)}}, &nl)
	live, suiteErr := liveSuites(ctx, c)
	if err := firstErr(nodeErr, suiteErr); err != nil {
		if statusOf(err) == 401 {
			f.publish([]event{{Type: "session", Data: mustJSON(map[string]string{"error": err.Error()})}})
		}
		return
	}
	f.mu.Lock()
	known := make(map[string]suiteEvent, len(f.suites))
	for id, s := range f.suites {
		known[id] = s
	}
	f.mu.Unlock()
	// A suite that left the live list ended: read its final state once.
	for id := range known {
		if _, ok := live[id]; !ok {
			var s api.Suite
			if err := c.get(ctx, "/v1/suites/"+esc(id), nil, &s); err == nil {
				live[id] = suiteOf(s)
			} else if statusOf(err) == 404 {
				f.forgetSuite(id)
			}
		}
	}
	f.apply(nl.Nodes, live)
}

// liveSuites reads the Open and Closed suites: those whose counts move.
func liveSuites(ctx context.Context, c caller) (map[string]suiteEvent, error) {
	out := map[string]suiteEvent{}
	for _, st := range []string{api.SuiteOpen, api.SuiteClosed} {
		var sl api.SuiteList
		if err := c.get(ctx, "/v1/suites", url.Values{"state": {st}, "limit": {"200"}}, &sl); err != nil {
			return nil, err
		}
		for _, s := range sl.Suites {
			out[s.ID] = suiteOf(s)
		}
	}
	return out, nil
}

func (f *feed) forgetSuite(id string) {
	f.mu.Lock()
	delete(f.suites, id)
	f.mu.Unlock()
}

func suiteOf(s api.Suite) suiteEvent {
	total := s.Counts.Total()
	ended := s.Counts.Finished + s.Counts.Failed + s.Counts.Cancelled
	pct := 0
	if total > 0 {
		pct = ended * 100 / total
	}
	return suiteEvent{ID: s.ID, Name: s.Name, State: s.State, Counts: s.Counts, Total: total, Percent: pct}
}

// apply diffs a poll against the last one and publishes the differences.
// The first poll is the baseline: the page shows it already.
func (f *feed) apply(nodes []api.Node, suites map[string]suiteEvent) {
	var evs []event
	f.mu.Lock()
	baseline := !f.polled
	f.polled = true
	for _, n := range nodes {
		ne := nodeEvent{ID: n.ID, Name: n.Name, Status: n.Status, Reason: n.StatusReason, AgentState: n.AgentState}
		if old, ok := f.nodes[n.ID]; !ok || old != ne {
			f.nodes[n.ID] = ne
			if !baseline {
				evs = append(evs, event{Type: "node", Data: mustJSON(ne)})
			}
		}
	}
	ended := 0
	for id, se := range suites {
		ended += se.Counts.Finished + se.Counts.Failed
		if old, ok := f.suites[id]; !ok || old != se {
			f.suites[id] = se
			if !baseline {
				evs = append(evs, event{Type: "suite", Data: mustJSON(se)})
			}
		}
		if se.State == api.SuiteComplete || se.State == api.SuiteCancelled {
			delete(f.suites, id) // reported once; it no longer moves
		}
	}
	if r, ok := f.rateLocked(ended); ok {
		evs = append(evs, event{Type: "rate", Data: mustJSON(map[string]float64{"per_second": r})})
	}
	f.mu.Unlock()
	f.publish(evs)
}

// rateLocked records how many tasks of the live suites have ended and
// returns the tasks ended per second over the last feedRateSpan, when it
// changed since the last poll.
func (f *feed) rateLocked(ended int) (float64, bool) {
	now := f.now()
	f.done = append(f.done, doneSample{now, ended})
	for len(f.done) > 1 && now.Sub(f.done[0].at) > feedRateSpan {
		f.done = f.done[1:]
	}
	r, ok := rateOf(f.done)
	if !ok || (f.rateSent && r == f.lastRate) {
		return 0, false
	}
	f.rateSent, f.lastRate = true, r
	return r, true
}

// rateOf is the tasks ended per second over samples, to a tenth. Suites
// that end leave the sum: a drop is not a negative rate.
func rateOf(samples []doneSample) (float64, bool) {
	if len(samples) < 2 {
		return 0, false
	}
	d := 0
	for i := 1; i < len(samples); i++ {
		d += max(samples[i].done-samples[i-1].done, 0)
	}
	span := samples[len(samples)-1].at.Sub(samples[0].at).Seconds()
	if span <= 0 {
		return 0, false
	}
	return math.Round(float64(d)/span*10) / 10, true
}

// publish numbers the events, keeps them in the ring and wakes streams.
func (f *feed) publish(evs []event) {
	if len(evs) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range evs {
		f.last++
		e.ID = f.last
		f.ring = append(f.ring, e)
	}
	if over := len(f.ring) - feedRing; over > 0 {
		f.ring = append([]event(nil), f.ring[over:]...)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// rate is the latest dispatch rate, tasks ended per second; false before
// two polls.
func (f *feed) rate() (float64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return rateOf(f.done)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs go here
	}
	return b
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
