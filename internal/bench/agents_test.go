package bench

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestRunAgentsSmall runs the harness itself on a handful of agents: every
// one connects, heartbeats are counted, and no node is declared offline.
func TestRunAgentsSmall(t *testing.T) {
	bin := nodemgrBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := RunAgents(ctx, AgentsConfig{Binary: bin, Agents: 20, Heartbeat: 100 * time.Millisecond, Measure: time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Holds() {
		t.Errorf("20 agents did not hold: %+v", r)
	}
	// 20 agents at 10/s for about a second: far more than one round.
	if r.Heartbeats < 20 || r.P50 <= 0 || r.P99 < r.P50 || r.ServerRSS == 0 {
		t.Errorf("implausible result %+v", r)
	}
}
