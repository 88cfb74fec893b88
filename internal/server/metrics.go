package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodemgr/nodemgr/api"
)

// metrics are the server's Prometheus instruments, on a registry of its own
// so several servers can live in one process (tests, the bench harness).
type metrics struct {
	registry       *prometheus.Registry
	handler        http.Handler
	httpRequests   *prometheus.CounterVec
	httpDuration   *prometheus.HistogramVec
	heartbeats     prometheus.Counter
	heartbeatFlush prometheus.Histogram
	markedOffline  prometheus.Counter
	confirmedAlive prometheus.Counter
	silentAgents   prometheus.Counter
	notifySent     prometheus.Counter
	protocolErrors prometheus.Counter
	tasksReported  prometheus.Counter
	tasksClaimed   prometheus.Counter
	tasksReturned  prometheus.Counter
	taskReports    *prometheus.CounterVec
	stats          *statsCollector
}

// longLived are the routes whose requests last as long as what they carry:
// the agent's WebSocket, a command's output. Their durations would drown
// the latency histogram, so it leaves them out; they are still counted.
var longLived = map[string]bool{
	"GET /v1/agent/connect":                  true,
	"POST /v1/deployments/{deployment}/exec": true,
}

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
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_heartbeats_total", Help: "Agent heartbeats received.",
		}),
		heartbeatFlush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodemgr_heartbeat_flush_seconds", Help: "Time to write one batch of heartbeats to the store.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		markedOffline: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_nodes_marked_offline_total", Help: "Nodes marked offline after failed confirmation.",
		}),
		confirmedAlive: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_nodes_confirmed_alive_total", Help: "Suspect nodes that answered the confirmation ping.",
		}),
		silentAgents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_agents_silent_total", Help: "Agent connections dropped because the agent stopped answering (frozen or cut off).",
		}),
		notifySent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_notifications_sent_total", Help: "Notifications pushed to agents (replays included).",
		}),
		protocolErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_agent_protocol_errors_total", Help: "Agent connections closed for a malformed frame.",
		}),
		tasksReported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_task_attempts_finished_total", Help: "Task attempt reports applied (first commit wins).",
		}),
		tasksClaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_tasks_claimed_total", Help: "Tasks agents claimed to run (dispatch).",
		}),
		tasksReturned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_tasks_returned_total", Help: "Claimed tasks agents gave back unstarted.",
		}),
		taskReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemgr_task_reports_total",
			Help: "Task attempt reports received from agents, by outcome (succeeded, failed, stopped); repeats included.",
		}, []string{"outcome"}),
		stats: newStatsCollector(s, statsTTL),
	}
	for _, o := range []string{api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped} {
		m.taskReports.WithLabelValues(o) // a rate of a series that is not there yet is no rate
	}
	reg.MustRegister(m.httpRequests, m.httpDuration, m.heartbeats, m.heartbeatFlush,
		m.markedOffline, m.confirmedAlive, m.silentAgents, m.notifySent, m.protocolErrors, m.tasksReported,
		m.tasksClaimed, m.tasksReturned, m.taskReports,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodemgr_agents_connected", Help: "Agents holding a WebSocket to this server.",
		}, func() float64 { return float64(s.hub.count()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodemgr_leader", Help: "1 while this replica holds the leader lease and runs the singleton loops, else 0.",
			ConstLabels: prometheus.Labels{"replica": s.cfg.ReplicaID},
		}, func() float64 {
			if _, ok := s.leading.current(); ok {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodemgr_leader_term", Help: "The leader lease's term this replica leads in; 0 while it does not lead.",
		}, func() float64 { lease, _ := s.leading.current(); return float64(lease.Term) }),
		m.stats,
	)
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

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// statsTTL is how long the store's counts serve scrapes before they are
// asked again: several Prometheus servers scraping every few seconds cost
// the store one round of queries.
const statsTTL = 5 * time.Second

// statsTimeout bounds the store queries of one scrape.
const statsTimeout = 5 * time.Second

var (
	nodesDesc  = prometheus.NewDesc("nodemgr_nodes", "Nodes by status.", []string{"status"}, nil)
	suitesDesc = prometheus.NewDesc("nodemgr_suites", "Task suites by state.", []string{"state"}, nil)
	tasksDesc  = prometheus.NewDesc("nodemgr_tasks",
		"Tasks by state; Finished, Failed and Cancelled count how tasks ended.", []string{"state"}, nil)
	queueDesc = prometheus.NewDesc("nodemgr_task_queue_depth",
		"Tasks Ready and waiting for an agent to claim them.", nil, nil)
)

// statsCollector exports the store's counts of nodes, suites and tasks,
// asking the store at most once per ttl.
type statsCollector struct {
	s   *Server
	ttl time.Duration

	mu     sync.Mutex
	at     time.Time // when the counts were read; zero: never, or failed
	nodes  map[string]int
	suites map[string]int
	tasks  api.TaskCounts
}

func newStatsCollector(s *Server, ttl time.Duration) *statsCollector {
	return &statsCollector{s: s, ttl: ttl}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- suitesDesc
	ch <- tasksDesc
	ch <- queueDesc
}

// Collect exports the counts. When the store cannot answer, the series are
// left out of the scrape (and the failure is logged) rather than shown stale.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) >= c.ttl {
		if err := c.refresh(); err != nil {
			c.at = time.Time{}
			c.s.log.Warn("metrics: count nodes, suites and tasks", "err", err)
			return
		}
	}
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

func (c *statsCollector) refresh() error {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	nodes, err := c.s.store.CountNodes(ctx)
	if err != nil {
		return err
	}
	suites, tasks, err := c.s.store.CountSuites(ctx)
	if err != nil {
		return err
	}
	c.at, c.nodes, c.suites, c.tasks = time.Now(), nodes, suites, tasks
	return nil
}
