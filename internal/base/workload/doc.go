// Package workload holds what a workload's spec must be: the checks of
// container jobs, service specs, artifact IDs and run-as users. The server
// runs them to refuse a bad spec before it is stored; the node runs them
// again before it acts, so both sides hold one rule.
package workload
