package hub

import "github.com/prometheus/client_golang/prometheus"

// metrics are the hub's Prometheus instruments; the server registers them
// (Collectors) on its registry.
type metrics struct {
	heartbeats     prometheus.Counter
	heartbeatFlush prometheus.Histogram
	markedOffline  prometheus.Counter
	confirmedAlive prometheus.Counter
	silentAgents   prometheus.Counter
	notifySent     prometheus.Counter
	gauges         []prometheus.Collector
}

func newMetrics(h *Hub) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &metrics{
		heartbeats: counter("nodemgr_heartbeats_total", "Agent heartbeats received."),
		heartbeatFlush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodemgr_heartbeat_flush_seconds", Help: "Time to write one batch of heartbeats to the store.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		markedOffline:  counter("nodemgr_nodes_marked_offline_total", "Nodes marked offline after failed confirmation."),
		confirmedAlive: counter("nodemgr_nodes_confirmed_alive_total", "Suspect nodes that answered the confirmation ping."),
		silentAgents:   counter("nodemgr_agents_silent_total", "Agent connections dropped because the agent stopped answering (frozen or cut off)."),
		notifySent:     counter("nodemgr_notifications_sent_total", "Notifications pushed to agents (replays included)."),
		gauges: []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "nodemgr_agents_connected", Help: "Agents holding a WebSocket to this server.",
			}, func() float64 { return float64(h.Count()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "nodemgr_leader", Help: "1 while this replica holds the leader lease and runs the singleton loops, else 0.",
				ConstLabels: prometheus.Labels{"replica": h.cfg.ReplicaID},
			}, func() float64 {
				if _, ok := h.Leads(); ok {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "nodemgr_leader_term", Help: "The leader lease's term this replica leads in; 0 while it does not lead.",
			}, func() float64 { lease, _ := h.Leads(); return float64(lease.Term) }),
		},
	}
}

// Collectors are the hub's instruments, for the server's registry.
func (h *Hub) Collectors() []prometheus.Collector {
	m := h.metrics
	return append([]prometheus.Collector{m.heartbeats, m.heartbeatFlush, m.markedOffline,
		m.confirmedAlive, m.silentAgents, m.notifySent}, m.gauges...)
}
