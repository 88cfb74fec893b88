// Package bench holds nodemgr's load harnesses. They drive a real server
// process over loopback and report rates and latencies together with a
// baseline measured in the same run, because these machines are noisy.
package bench
