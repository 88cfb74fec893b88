package server

import (
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAuthenticatedRequest is what one request with an API token
// costs the process (server and in-process client together): GET
// /v1/whoami, which does nothing but authenticate, sent by 8 clients at
// once. It reports cpu-µs/op beside ns/op, since CPU is what the server
// takes from the compilers on a shared machine. Compare commits by
// running it on each in one session.
func BenchmarkAuthenticatedRequest(b *testing.B) {
	ts := newTestServerWith(b, Config{})
	token := ts.user(b, "ann", false, map[string]string{"ml": "Write"})
	// Kept connections, as the CLI's and agents' are: the bench measures
	// requests, not TCP handshakes.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	b.SetParallelism(4) // 8 clients on 2 cores
	start := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequestWithContext(b.Context(), "GET", ts.http.URL+"/v1/whoami", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body) // read to the end, or the connection is not kept
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("GET /v1/whoami = %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU this process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
