// Package bench holds nodemgr's load harnesses. They drive a real server
// process over loopback and report rates and latencies together with a
// baseline measured in the same run, because these machines are noisy.
package bench

import "strings"

// isState reports whether state is one of states, in any case: a binary
// measured --against may be older than one spelling of states.
func isState(state string, states ...string) bool {
	for _, s := range states {
		if strings.EqualFold(state, s) {
			return true
		}
	}
	return false
}
