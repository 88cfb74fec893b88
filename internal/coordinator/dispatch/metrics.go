package dispatch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodemgr/nodemgr/api"
)

// metrics are the dispatcher's Prometheus instruments; the server
// registers them (Collectors) on its registry.
type metrics struct {
	tasksReported prometheus.Counter
	tasksClaimed  prometheus.Counter
	tasksReturned prometheus.Counter
	taskReports   *prometheus.CounterVec
	cacheHits     prometheus.Counter
	cacheMisses   prometheus.Counter
	fetchesParked prometheus.Gauge
}

func newMetrics() *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		tasksReported: counter("nodemgr_task_attempts_finished_total", "Task attempt reports applied (first commit wins)."),
		tasksClaimed:  counter("nodemgr_tasks_claimed_total", "Tasks agents claimed to run (dispatch)."),
		tasksReturned: counter("nodemgr_tasks_returned_total", "Claimed tasks agents gave back unstarted."),
		cacheHits:     counter("nodemgr_action_cache_hits_total", "Claimed tasks answered from the action cache, not run."),
		cacheMisses:   counter("nodemgr_action_cache_misses_total", "Claimed tasks that opted in to the action cache and ran: it held no result for them."),
		fetchesParked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodemgr_task_fetches_parked",
			Help: "Agents' task fetches held on this server until their suite has tasks Ready (tasks.fetch wait_ms)."}),
		taskReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodemgr_task_reports_total",
			Help: "Task attempt reports received from agents, by outcome (succeeded, failed, stopped); repeats included.",
		}, []string{"outcome"}),
	}
	for _, o := range []string{api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped} {
		m.taskReports.WithLabelValues(o) // a rate of a series that is not there yet is no rate
	}
	return m
}

// Collectors are the dispatcher's instruments, for the server's registry.
func (d *Dispatcher) Collectors() []prometheus.Collector {
	m := d.metrics
	return []prometheus.Collector{m.tasksReported, m.tasksClaimed, m.tasksReturned, m.taskReports, m.cacheHits, m.cacheMisses, m.fetchesParked}
}
