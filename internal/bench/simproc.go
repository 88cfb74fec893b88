package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A process holds a socket per simulated agent, and a machine's open-file
// limit may be below the agents wanted (20,000 where the hard limit cannot
// be raised). The agents are therefore run by child processes of the same
// binary (`nodemgr bench sim-agents`), each with a share, driven over its
// stdin and stdout, one line at a time:
//
//	parent → child: the simPart as JSON, then "measure", then "stop"
//	child → parent: "connected N" as it goes, "ready" once all are
//	                connected (or failed), then the simResult as JSON
const maxAgentsPerProcess = 15000

// simPart is one child's share.
type simPart struct {
	From      int      `json:"from"` // index of its first agent
	Count     int      `json:"count"`
	Servers   []string `json:"servers"` // agent i connects to Servers[i % len]
	JoinToken string   `json:"join_token"`
	Connect   int      `json:"connect"` // connecting at once
}

// simResult is what a child measured.
type simResult struct {
	Connected   int     `json:"connected"`
	FirstError  string  `json:"first_error,omitempty"`
	Latencies   []int64 `json:"latencies_ns"`
	Failed      int     `json:"failed"`
	Disconnects int64   `json:"disconnects"`
	IdleAsks    int     `json:"idle_asks"`
	IdlePoll    int64   `json:"idle_poll_ns"` // the welcome's
}

// RunSimAgents is the child's side: it reads its share from in, connects
// the agents, heartbeats with them, and measures between "measure" and
// "stop".
func RunSimAgents(ctx context.Context, in io.Reader, out io.Writer) error {
	raiseFileLimit()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() {
		return errors.New("sim-agents: no share on stdin")
	}
	var part simPart
	if err := json.Unmarshal(sc.Bytes(), &part); err != nil {
		return fmt.Errorf("sim-agents: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		outMu.Unlock()
	}

	agents := make([]*simAgent, part.Count)
	var measuring atomic.Bool
	var connected atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(part.Connect, 1))
	for i := range agents {
		a := &simAgent{idx: part.From + i, measuring: &measuring}
		agents[i] = a
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.connect(ctx, part.Servers[a.idx%len(part.Servers)], part.JoinToken)
			<-sem
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			go a.beat(ctx, &measuring) // from the moment it is connected, as a real agent
			go a.idle(ctx)
			if n := connected.Add(1); n%250 == 0 {
				say("connected %d", n)
			}
		}()
	}
	wg.Wait()
	say("connected %d", connected.Load())
	say("ready")
	for sc.Scan() {
		switch strings.TrimSpace(sc.Text()) {
		case "measure":
			measuring.Store(true)
		case "stop":
			measuring.Store(false)
			res := simResult{Connected: int(connected.Load())}
			if firstErr != nil {
				res.FirstError = firstErr.Error()
			}
			for _, a := range agents {
				a.mu.Lock()
				for _, l := range a.latencies {
					res.Latencies = append(res.Latencies, int64(l))
				}
				res.Failed += a.failed
				a.mu.Unlock()
				res.Disconnects += a.disconnects.Load()
				res.IdleAsks += int(a.asks.Load())
				res.IdlePoll = max(res.IdlePoll, int64(a.idlePoll))
			}
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			say("%s", b)
			return nil
		}
	}
	return errors.New("sim-agents: stdin closed before stop")
}

// simProc is a running child.
type simProc struct {
	cmd       *exec.Cmd
	in        io.WriteCloser
	lines     *bufio.Scanner
	connected atomic.Int64
}

// startSimProcs starts the children for n agents, each with a share of at
// most maxAgentsPerProcess, and returns once every child is ready;
// progress hears the connected count as it grows.
func startSimProcs(ctx context.Context, binary string, n int, servers []string, joinToken string, connect int, progress func(int64)) ([]*simProc, error) {
	parts := (n + maxAgentsPerProcess - 1) / maxAgentsPerProcess
	per := (n + parts - 1) / parts
	var procs []*simProc
	for from := 0; from < n; from += per {
		part := simPart{From: from, Count: min(per, n-from), Servers: servers, JoinToken: joinToken, Connect: max(1, connect/parts)}
		p, err := startSimProc(ctx, binary, part)
		if err != nil {
			stopSimProcs(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.waitReady(func() {
				var sum int64
				for _, q := range procs {
					sum += q.connected.Load()
				}
				progress(sum)
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopSimProcs(procs)
		return nil, err
	}
	return procs, nil
}

func startSimProc(ctx context.Context, binary string, part simPart) (*simProc, error) {
	cmd := exec.CommandContext(ctx, binary, "bench", "sim-agents")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a simulator process: %w", err)
	}
	b, _ := json.Marshal(part)
	if _, err := fmt.Fprintf(in, "%s\n", b); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 256<<20) // the result line holds every latency
	return &simProc{cmd: cmd, in: in, lines: lines}, nil
}

// waitReady reads progress lines until "ready".
func (p *simProc) waitReady(progress func()) error {
	for p.lines.Scan() {
		line := p.lines.Text()
		if line == "ready" {
			return nil
		}
		if v, ok := strings.CutPrefix(line, "connected "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			p.connected.Store(n)
			progress()
		}
	}
	return fmt.Errorf("a simulator process ended before its agents were connected: %v", p.lines.Err())
}

// tellAll sends a command line to every child.
func tellAll(procs []*simProc, line string) {
	for _, p := range procs {
		fmt.Fprintln(p.in, line)
	}
}

// results stops the measuring and collects every child's result.
func collectSims(procs []*simProc) ([]simResult, error) {
	tellAll(procs, "stop")
	var out []simResult
	for _, p := range procs {
		var r simResult
		if !p.lines.Scan() {
			return out, fmt.Errorf("a simulator process gave no result: %v", p.lines.Err())
		}
		if err := json.Unmarshal(p.lines.Bytes(), &r); err != nil {
			return out, fmt.Errorf("a simulator process's result: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// stopSimProcs ends the children.
func stopSimProcs(procs []*simProc) {
	for _, p := range procs {
		p.in.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	}
}
