package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	notifySent     prometheus.Counter
	protocolErrors prometheus.Counter
	tasksReported  prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		registry: reg,
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemgr_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodemgr_http_request_duration_seconds", Help: "HTTP request latency by route.",
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
		notifySent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_notifications_sent_total", Help: "Notifications pushed to agents (replays included).",
		}),
		protocolErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_agent_protocol_errors_total", Help: "Agent connections closed for a malformed frame.",
		}),
		tasksReported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_task_attempts_finished_total", Help: "Task attempt reports applied (first commit wins).",
		}),
	}
	reg.MustRegister(m.httpRequests, m.httpDuration, m.heartbeats, m.heartbeatFlush,
		m.markedOffline, m.confirmedAlive, m.notifySent, m.protocolErrors, m.tasksReported,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodemgr_agents_connected", Help: "Agents holding a WebSocket to this server.",
		}, func() float64 { return float64(s.hub.count()) }),
	)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}
