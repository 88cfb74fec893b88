package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// LatencyConfig sets up the lone-task latency harness.
type LatencyConfig struct {
	Binary  string        // nodemgr binary: server, agent and workers
	Against string        // another binary to measure in the same run, or ""
	Samples int           // tasks, one at a time
	Gap     time.Duration // idle time before each: the pool's fetches back off meanwhile
}

// LatencyResult is one binary's lone-task latency: from sending the
// submit to the result stored (the server stamps a result as it applies
// the agent's report), and to the client seeing it (polling every 2 ms).
type LatencyResult struct {
	Binary  string        `json:"binary"`
	Samples int           `json:"samples"`
	P50     time.Duration `json:"p50"`
	P90     time.Duration `json:"p90"`
	P99     time.Duration `json:"p99"`
	SeenP50 time.Duration `json:"seen_p50"`
	SeenP99 time.Duration `json:"seen_p99"`
}

// RunLatency starts a server and one agent as processes, gives the agent
// an open suite of one command worker with the default prefetch, and
// submits one `true` task at a time through the API to the idle pool,
// timing each to its stored result. With Against, a second server and
// agent of that binary run beside the first and the samples alternate
// between them, so both see the same machine.
func RunLatency(ctx context.Context, cfg LatencyConfig, progress io.Writer) ([]LatencyResult, error) {
	binaries := []string{cfg.Binary}
	if cfg.Against != "" {
		binaries = append(binaries, cfg.Against)
	}
	var rigs []*rig
	var suites []string
	defer func() {
		for _, r := range rigs {
			r.close()
		}
	}()
	for i, bin := range binaries {
		r, err := startRig(ctx, bin, fmt.Sprintf("bench-latency-%d", i))
		if err != nil {
			return nil, err
		}
		rigs = append(rigs, r)
		su, err := r.loneTaskSuite(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		suites = append(suites, su)
	}
	stored := make([][]time.Duration, len(rigs))
	seen := make([][]time.Duration, len(rigs))
	for i := range cfg.Samples {
		if i%20 == 0 {
			fmt.Fprintf(progress, "  sample %d of %d\n", i+1, cfg.Samples)
		}
		for j, r := range rigs {
			time.Sleep(cfg.Gap)
			st, sn, err := r.loneTask(ctx, suites[j])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.binary, err)
			}
			stored[j], seen[j] = append(stored[j], st), append(seen[j], sn)
		}
	}
	out := make([]LatencyResult, len(rigs))
	for j, r := range rigs {
		slices.Sort(stored[j])
		slices.Sort(seen[j])
		q := func(xs []time.Duration, p int) time.Duration { return xs[min(len(xs)-1, len(xs)*p/100)] }
		out[j] = LatencyResult{Binary: r.binary, Samples: len(stored[j]), P50: q(stored[j], 50), P90: q(stored[j], 90),
			P99: q(stored[j], 99), SeenP50: q(seen[j], 50), SeenP99: q(seen[j], 99)}
	}
	return out, nil
}

// loneTaskSuite makes an open suite of one command worker that only this
// rig's node runs, and waits until a first task went through: the pool is
// up and idle.
func (r *rig) loneTaskSuite(ctx context.Context) (string, error) {
	tag := fmt.Sprintf("bench-latency-%d", time.Now().UnixNano()%1e6)
	su, err := r.c.CreateSuite(ctx, api.SuiteSpec{Name: tag, Tags: []string{tag},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	if err != nil {
		return "", err
	}
	if _, err := r.c.PatchNode(ctx, r.node.ID, api.NodePatch{AddTags: []string{tag}}); err != nil {
		return "", err
	}
	if _, _, err := r.loneTask(ctx, su.ID); err != nil {
		return "", fmt.Errorf("first task: %w", err)
	}
	return su.ID, nil
}

// loneTask submits one `true` task and waits for its result: stored is the
// time from sending the submit to the result's stamp, seen to our poll
// finding it.
func (r *rig) loneTask(ctx context.Context, suiteID string) (stored, seen time.Duration, err error) {
	start := time.Now()
	ids, err := r.c.SubmitTasks(ctx, suiteID, []api.TaskSpec{{Argv: []string{"true"}}})
	if err != nil {
		return 0, 0, err
	}
	for deadline := start.Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		t, err := r.c.Task(ctx, ids[0])
		if err != nil {
			return 0, 0, err
		}
		if t.Result != nil && !isState(t.State, api.TaskReady, api.TaskRunning) {
			return t.Result.FinishedAt.Sub(start), time.Since(start), nil
		}
	}
	return 0, 0, fmt.Errorf("task %s has no result after a minute", ids[0])
}
