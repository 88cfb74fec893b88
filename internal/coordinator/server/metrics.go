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

	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storemetrics"
)

// metrics are the server's Prometheus instruments, on a registry of its own
// so several servers can live in one process (tests, the bench harness).
type metrics struct {
	registry       *prometheus.Registry
	handler        http.Handler
	httpRequests   *prometheus.CounterVec
	httpDuration   *prometheus.HistogramVec
	protocolErrors prometheus.Counter
	stats          *storemetrics.Collector
	// The overlay's relay: packets passed on, and batches dropped (the
	// peer not connected here, or not answering).
	overlayRelayed, overlayRelayDropped prometheus.Counter
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
		stats: storemetrics.New(s.lifeCtx, s.backend, s.cfg.StoreTimeout, s.log),
		overlayRelayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_overlay_relayed_packets_total", Help: "WireGuard packets relayed between nodes that cannot reach each other over UDP.",
		}),
		overlayRelayDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodemgr_overlay_relay_dropped_total", Help: "Batches of relayed packets dropped: the peer was not connected to this server, or did not take them in time.",
		}),
	}
	reg.MustRegister(m.httpRequests, m.httpDuration, m.protocolErrors, m.stats, m.overlayRelayed, m.overlayRelayDropped, overlayCollector{s.hub},
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
	s.metrics.stats.Update(r.Context(), !storeSilent(r.Context()))
	s.metrics.handler.ServeHTTP(w, r)
	return nil
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
