package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// metrics are the server's Prometheus instruments, on a registry of its own
// so several servers can live in one process (tests, the bench harness).
type metrics struct {
	registry       *prometheus.Registry
	handler        http.Handler
	httpRequests   *prometheus.CounterVec
	httpDuration   *prometheus.HistogramVec
	protocolErrors prometheus.Counter
	stats          *statsCollector
}

// longLived are the routes whose requests last as long as what they carry:
// the agent's WebSocket, a command's output. Their durations would drown
// the latency histogram, so it leaves them out; they are still counted.
var longLived = map[string]bool{
	"GET /v1/agent/connect":                  true,
	"POST /v1/deployments/{deployment}/exec": true,
}

// newMetrics makes the server's instruments and registers them with the
// hub's and the dispatcher's.
func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		registry: reg,
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemgr_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodemgr_http_request_duration_seconds",
			Help:    "HTTP request latency by route; the agent WebSocket and exec streams are left out.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		protocolErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_agent_protocol_errors_total", Help: "Agent connections closed for a malformed frame.",
		}),
		stats: newStatsCollector(s, statsTTL),
	}
	reg.MustRegister(m.httpRequests, m.httpDuration, m.protocolErrors, m.stats,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(s.hub.Collectors()...)
	reg.MustRegister(s.dispatcher.Collectors()...)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// observe records one request to route: its status and, unless the route
// is long-lived, its duration.
func (m *metrics) observe(route string, code string, took time.Duration) {
	m.httpRequests.WithLabelValues(route, code).Inc()
	if !longLived[route] {
		m.httpDuration.WithLabelValues(route).Observe(took.Seconds())
	}
}

// metricsPath is the scrape endpoint's.
const metricsPath = "/metrics"

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	// A scraper let in while the store did not answer gets the counts kept
	// at once, marked stale, rather than wait for the store again.
	s.metrics.stats.update(r.Context(), !storeSilent(r.Context()))
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// statsTTL is how long the store's counts serve scrapes before they are
// asked again: several Prometheus servers scraping every few seconds cost
// the store one round of queries. A read that failed is not tried again
// for as long either.
const statsTTL = 5 * time.Second

var (
	nodesDesc  = prometheus.NewDesc("nodemgr_nodes", "Nodes by status.", []string{"status"}, nil)
	suitesDesc = prometheus.NewDesc("nodemgr_suites", "Task suites by state.", []string{"state"}, nil)
	tasksDesc  = prometheus.NewDesc("nodemgr_tasks",
		"Tasks by state; Finished, Failed and Cancelled count how tasks ended.", []string{"state"}, nil)
	queueDesc = prometheus.NewDesc("nodemgr_task_queue_depth",
		"Tasks Ready and waiting for an agent to claim them.", nil, nil)
	staleDesc = prometheus.NewDesc("nodemgr_metrics_stale",
		"1 when the store's counts (nodemgr_nodes, nodemgr_suites, nodemgr_tasks, nodemgr_task_queue_depth) are the last ones read because the store did not answer them now, else 0.", nil, nil)
	ageDesc = prometheus.NewDesc("nodemgr_metrics_age_seconds",
		"Age of the store's counts in this scrape; absent until they were first read.", nil, nil)
)

// statsCollector exports the store's counts of nodes, suites and tasks,
// asking the store at most once per ttl. When the store does not answer,
// a scrape shows the counts last read, marked stale, rather than block or
// leave them out: a graph that keeps its last value with a stale flag
// says more during an outage than one with a hole.
type statsCollector struct {
	s   *Server
	ttl time.Duration

	mu      sync.Mutex
	at      time.Time     // when the counts were read; zero: never
	failed  time.Time     // when the last read failed; zero: it did not
	reading chan struct{} // closed when the read under way ends; nil: none
	nodes   map[string]int
	suites  map[string]int
	tasks   api.TaskCounts
}

func newStatsCollector(s *Server, ttl time.Duration) *statsCollector {
	return &statsCollector{s: s, ttl: ttl}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- suitesDesc
	ch <- tasksDesc
	ch <- queueDesc
	ch <- staleDesc
	ch <- ageDesc
}

// update starts a read of the counts when they are older than ttl and no
// read is under way. With wait, it returns once the read under way ended
// (it is bounded by the store timeout) or ctx did; without, at once.
func (c *statsCollector) update(ctx context.Context, wait bool) {
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
func (c *statsCollector) read(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(c.s.lifeCtx(), c.s.cfg.StoreTimeout)
	defer cancel()
	nodes, err := c.s.backend.CountNodes(ctx)
	var suites map[string]int
	var tasks api.TaskCounts
	if err == nil {
		suites, tasks, err = c.s.backend.CountSuites(ctx)
	}
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = store.TimeoutError("count nodes, suites and tasks", c.s.cfg.StoreTimeout)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = nil
	if err != nil {
		c.failed = time.Now()
		c.s.log.Warn("metrics: count nodes, suites and tasks; the last counts are shown, marked stale", "err", err)
		return
	}
	c.at, c.failed, c.nodes, c.suites, c.tasks = time.Now(), time.Time{}, nodes, suites, tasks
}

// Collect exports the counts last read, with whether they are stale and
// their age.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
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

// Scrapers while the store does not answer. Authenticating a scrape reads
// the store; a scraper whose token was accepted within scraperGrace is
// let in on that check when the store does not answer, so that it still
// gets the server's own series and the counts kept. A token the store
// refuses is forgotten at once.
const (
	scraperGrace = 15 * time.Minute
	maxScrapers  = 32 // tokens remembered; the oldest goes first
)

type scraperAuth struct {
	mu   sync.Mutex
	seen map[string]scraperSeen // by the hash of the token
}

type scraperSeen struct {
	p  auth.Principal
	at time.Time
}

type storeSilentKey struct{}

// storeSilent reports whether the request got in on a remembered check
// because the store did not answer.
func storeSilent(ctx context.Context) bool { return ctx.Value(storeSilentKey{}) != nil }

// check takes the outcome of authenticating a scrape and returns the one
// to act on, and the request marked when it got in on a remembered check.
func (a *scraperAuth) check(r *http.Request, p auth.Principal, err error) (*http.Request, auth.Principal, error) {
	secret, _ := auth.SplitPin(bearer(r))
	key := string(auth.Hash(secret))
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil && p.Admin:
		if a.seen == nil {
			a.seen = map[string]scraperSeen{}
		}
		if _, ok := a.seen[key]; !ok && len(a.seen) >= maxScrapers {
			oldest := ""
			for k, s := range a.seen {
				if oldest == "" || s.at.Before(a.seen[oldest].at) {
					oldest = k
				}
			}
			delete(a.seen, oldest)
		}
		a.seen[key] = scraperSeen{p: p, at: now}
	case errors.Is(err, errdefs.ErrUnavailable):
		s, ok := a.seen[key]
		if ok && now.Sub(s.at) < scraperGrace && (s.p.TokenExpires.IsZero() || now.Before(s.p.TokenExpires)) {
			return r.WithContext(context.WithValue(r.Context(), storeSilentKey{}, true)), s.p, nil
		}
	case err != nil:
		delete(a.seen, key)
	}
	return r, p, err
}
