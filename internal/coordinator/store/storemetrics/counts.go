// Package storemetrics exports the store's counts of nodes, suites and
// tasks as Prometheus gauges (a package of its own: the store knows no
// HTTP, and the Prometheus client does).
package storemetrics

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TTL is how long the store's counts serve scrapes before they are
// asked again: several Prometheus servers scraping every few seconds cost
// the store one round of queries. A read that failed is not tried again
// for as long either.
const TTL = 5 * time.Second

var (
	nodesDesc  = prometheus.NewDesc("nodemgr_nodes", "Nodes by status.", []string{"status"}, nil)
	suitesDesc = prometheus.NewDesc("nodemgr_suites", "Task suites by state.", []string{"state"}, nil)
	tasksDesc  = prometheus.NewDesc("nodemgr_tasks",
		"Tasks by state; finished, failed and cancelled count how tasks ended.", []string{"state"}, nil)
	queueDesc = prometheus.NewDesc("nodemgr_task_queue_depth",
		"Tasks Ready and waiting for an agent to claim them.", nil, nil)
	staleDesc = prometheus.NewDesc("nodemgr_metrics_stale",
		"1 when the store's counts (nodemgr_nodes, nodemgr_suites, nodemgr_tasks, nodemgr_task_queue_depth) are the last ones read because the store did not answer them now, else 0.", nil, nil)
	ageDesc = prometheus.NewDesc("nodemgr_metrics_age_seconds",
		"Age of the store's counts in this scrape; absent until they were first read.", nil, nil)
)

// Collector exports the store's counts of nodes, suites and tasks,
// asking the store at most once per ttl. When the store does not answer,
// a scrape shows the counts last read, marked stale, rather than block or
// leave them out: a graph that keeps its last value with a stale flag
// says more during an outage than one with a hole.
type Collector struct {
	store   Counter
	life    func() context.Context // the server's: a read outlives the scrape
	timeout time.Duration          // a read's bound (the store timeout)
	ttl     time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	at      time.Time     // when the counts were read; zero: never
	failed  time.Time     // when the last read failed; zero: it did not
	reading chan struct{} // closed when the read under way ends; nil: none
	nodes   map[string]int
	suites  map[string]int
	tasks   api.TaskCounts
}

// Counter counts the store's nodes, suites and tasks.
type Counter interface {
	CountNodes(ctx context.Context) (map[string]int, error)
	CountSuites(ctx context.Context) (map[string]int, api.TaskCounts, error)
}

// New exports st's counts, read at most once per TTL,
// each read bounded by timeout and ended with life.
func New(life func() context.Context, st Counter, timeout time.Duration, log *slog.Logger) *Collector {
	return &Collector{store: st, life: life, timeout: timeout, ttl: TTL, log: log}
}

// Expire makes the counts due: the next Update reads the store again.
func (c *Collector) Expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(-c.ttl)
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- suitesDesc
	ch <- tasksDesc
	ch <- queueDesc
	ch <- staleDesc
	ch <- ageDesc
}

// Update starts a read of the counts when they are older than ttl and no
// read is under way. With wait, it returns once the read under way ended
// (it is bounded by the store timeout) or ctx did; without, at once.
func (c *Collector) Update(ctx context.Context, wait bool) {
	c.mu.Lock()
	if c.reading == nil && time.Since(c.at) >= c.ttl && time.Since(c.failed) >= c.ttl {
		c.reading = make(chan struct{})
		go c.read(c.reading)
	}
	reading := c.reading
	c.mu.Unlock()
	if reading == nil || !wait {
		return
	}
	select {
	case <-reading:
	case <-ctx.Done():
	}
}

// read asks the store for the counts. It is not the request's: a scraper
// that hangs up must not leave a cancelled read's answer for the others.
func (c *Collector) read(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(c.life(), c.timeout)
	defer cancel()
	nodes, err := c.store.CountNodes(ctx)
	var suites map[string]int
	var tasks api.TaskCounts
	if err == nil {
		suites, tasks, err = c.store.CountSuites(ctx)
	}
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = store.TimeoutError("count nodes, suites and tasks", c.timeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = nil
	if err != nil {
		c.failed = time.Now()
		c.log.Warn("metrics: count nodes, suites and tasks; the last counts are shown, marked stale", "err", err)
		return
	}
	c.at, c.failed, c.nodes, c.suites, c.tasks = time.Now(), time.Time{}, nodes, suites, tasks
}

// Collect exports the counts last read, with whether they are stale and
// their age.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := 0.0
	if c.at.IsZero() || !c.failed.IsZero() || c.reading != nil {
		stale = 1
	}
	ch <- prometheus.MustNewConstMetric(staleDesc, prometheus.GaugeValue, stale)
	if c.at.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, time.Since(c.at).Seconds())
	// Every known state is exported, 0 included, so that a series does not
	// vanish when its last member leaves it.
	for _, st := range []string{api.StatusOnline, api.StatusSuspect, api.StatusOffline} {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(c.nodes[st]), st)
	}
	for _, st := range []string{api.SuiteOpen, api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled} {
		ch <- prometheus.MustNewConstMetric(suitesDesc, prometheus.GaugeValue, float64(c.suites[st]), st)
	}
	t := c.tasks
	for st, n := range map[string]int{api.TaskReady: t.Ready, api.TaskRunning: t.Running,
		api.TaskFinished: t.Finished, api.TaskFailed: t.Failed, api.TaskCancelled: t.Cancelled} {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(n), st)
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(t.Ready))
}
