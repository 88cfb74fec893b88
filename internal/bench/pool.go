package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	nmclient "github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/dockerexec"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// PoolConfig sets up the pool cold-path harness.
type PoolConfig struct {
	Binary      string // nodemgr binary for the server
	AgentBinary string // static nodemgr binary delivered onto the machines; default Binary
	Image       string // image on the engine
	Runs        int    // rounds per side
	DockerHost  string
}

// PoolResult compares nodemgr's cold path with doing its steps by hand,
// interleaved in one run.
type PoolResult struct {
	Runs int `json:"runs"`
	// Cold is from suite create + one task submit, on a pool at 0
	// machines, to that task's result stored.
	ColdP50 time.Duration `json:"cold_p50"`
	ColdP90 time.Duration `json:"cold_p90"`
	// ByHand is a docker run of the same image, the agent binary copied
	// in and started with a join token, until its node is online.
	ByHandP50 time.Duration `json:"by_hand_p50"`
	ByHandP90 time.Duration `json:"by_hand_p90"`
}

// RunPool measures, round by round, nodemgr's cold path against the same
// steps done by hand through the engine API, each round starting from no
// machine.
func RunPool(ctx context.Context, cfg PoolConfig, progress io.Writer) (PoolResult, error) {
	if cfg.AgentBinary == "" {
		cfg.AgentBinary = cfg.Binary
	}
	opts := []client.Opt{client.FromEnv}
	var settings map[string]string
	if cfg.DockerHost != "" {
		opts = append(opts, client.WithHost(cfg.DockerHost))
		settings = map[string]string{"host": cfg.DockerHost}
	}
	eng, err := client.New(opts...)
	if err != nil {
		return PoolResult{}, fmt.Errorf("docker engine: %w", err)
	}
	defer eng.Close()
	if _, err := eng.ImageInspect(ctx, cfg.Image); err != nil {
		return PoolResult{}, fmt.Errorf("image %s is not on the engine (%v): no registry is used; import one, e.g. `tar -C rootfs -c . | docker import - %s`", cfg.Image, err, cfg.Image)
	}
	ex, err := dockerexec.New(settings)
	if err != nil {
		return PoolResult{}, err
	}
	defer ex.Close()
	args := []string{"--agent-binary", cfg.AgentBinary, "--drift-interval", "1h"}
	if cfg.DockerHost != "" {
		args = append(args, "--docker-host", cfg.DockerHost)
	}
	srv, err := startServer(ctx, cfg.Binary, args...)
	if err != nil {
		return PoolResult{}, err
	}
	defer srv.stop()
	c := nmclient.New(srv.addr, srv.token)
	tmpl := fmt.Sprintf("name: bench-pool\nimage: %q\noverrides:\n  docker:\n    network_mode: host\n", cfg.Image)
	if _, err := c.PutDocument(ctx, "templates", "bench-pool", []byte(tmpl)); err != nil {
		return PoolResult{}, err
	}
	if _, err := c.ApplyPool(ctx, api.PoolSpec{Name: "bench", Template: "bench-pool", Provider: "docker", Tags: []string{"bench-pool"},
		Max: 1, IdleTimeout: api.Duration(300 * time.Millisecond), MinAge: api.Duration(100 * time.Millisecond)}); err != nil {
		return PoolResult{}, err
	}
	defer func() {
		// Leave no machine behind: the pool's last one goes before the
		// server does.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if c.DeletePool(cctx, "bench") == nil {
			waitMachinesGone(cctx, c, "bench")
		}
	}()

	res := PoolResult{Runs: cfg.Runs}
	var cold, byHand []time.Duration
	for i := range cfg.Runs {
		if err := waitPoolEmpty(ctx, c, "bench"); err != nil {
			return res, err
		}
		d, err := coldRound(ctx, c, fmt.Sprintf("cold-%d-%d", time.Now().UnixNano()%1e6, i))
		if err != nil {
			return res, err
		}
		cold = append(cold, d)
		if d, err = byHandRound(ctx, c, eng, ex, cfg, "http://"+srv.addr, i); err != nil {
			return res, err
		}
		byHand = append(byHand, d)
		fmt.Fprintf(progress, "\r  round %d/%d", i+1, cfg.Runs)
	}
	fmt.Fprintln(progress)
	res.ColdP50, res.ColdP90 = pct(cold, 50), pct(cold, 90)
	res.ByHandP50, res.ByHandP90 = pct(byHand, 50), pct(byHand, 90)
	return res, nil
}

// waitPoolEmpty waits until a pool has no machine left: the next round
// starts cold.
func waitPoolEmpty(ctx context.Context, c *nmclient.Client, pool string) error {
	for {
		p, err := c.Pool(ctx, pool)
		if err != nil {
			return err
		}
		live := 0
		for _, n := range p.Machines {
			live += n
		}
		if live == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool %s still has machines %v: %w", pool, p.Machines, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// coldRound creates a suite the pool serves, submits one task and waits
// for its result.
func coldRound(ctx context.Context, c *nmclient.Client, name string) (time.Duration, error) {
	start := time.Now()
	if _, err := c.CreateSuite(ctx, api.SuiteSpec{Name: name, Tags: []string{"bench-pool"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}); err != nil {
		return 0, err
	}
	ids, err := c.SubmitTasks(ctx, name, []api.TaskSpec{{Argv: []string{"true"}}})
	if err != nil {
		return 0, err
	}
	for {
		t, err := c.Task(ctx, ids[0])
		if err != nil {
			return 0, err
		}
		switch strings.ToLower(t.State) { // --against a binary that capitalized states
		case api.TaskFinished:
			took := time.Since(start)
			c.CancelSuite(ctx, name)
			return took, nil
		case api.TaskFailed, api.TaskCancelled:
			return 0, fmt.Errorf("bench task %s is %s", t.ID, t.State)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// byHandRound does what a user would without pools: docker run the image,
// copy the agent in, start it with a join token, wait for its node online.
func byHandRound(ctx context.Context, c *nmclient.Client, eng *client.Client, ex execute.Executor, cfg PoolConfig, serverURL string, i int) (time.Duration, error) {
	name := fmt.Sprintf("by-hand-%d-%d", time.Now().UnixNano()%1e6, i)
	tok, err := c.CreateJoinToken(ctx, api.CreateTokenRequest{MaxUses: 1})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	res, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: cfg.Image, Cmd: []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"}, Labels: map[string]string{"nodemgr.bench": "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "host"},
	})
	if err != nil {
		return 0, err
	}
	defer eng.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := eng.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return 0, err
	}
	d := provision.Deployment{Name: name, ResourceID: res.ID, Executors: []string{dockerexec.Capability}}
	if err := ex.CopyTo(ctx, d, cfg.AgentBinary, "/opt/nodemgr/nodemgr"); err != nil {
		return 0, err
	}
	// The token goes in through a file, as docs/security.md says secrets should.
	script := fmt.Sprintf("printf '%%s' '%s' > /tmp/jt && /opt/nodemgr/nodemgr agent --server %s --data-dir /var/lib/nodemgr --name %s "+
		"--join-token-file /tmp/jt >/tmp/agent.log 2>&1 </dev/null &", tok.Secret, serverURL, name)
	if code, err := ex.Exec(ctx, d, execute.Command{Argv: []string{"sh", "-c", script}, Stdout: io.Discard, Stderr: os.Stderr}); err != nil || code != 0 {
		return 0, fmt.Errorf("start the agent by hand: exit %d, %v", code, err)
	}
	for {
		n, err := c.Node(ctx, name)
		if err == nil && n.Status == api.StatusOnline {
			took := time.Since(start)
			eng.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
			waitOffline(ctx, c, n.ID)
			c.DeleteNode(ctx, n.ID)
			return took, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the agent started by hand did not come online: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func waitOffline(ctx context.Context, c *nmclient.Client, id string) {
	for range 200 {
		if n, err := c.Node(ctx, id); err != nil || n.Status != api.StatusOnline {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMachinesGone waits until a removed pool's machines are all gone.
func waitMachinesGone(ctx context.Context, c *nmclient.Client, pool string) {
	for ctx.Err() == nil {
		live := 0
		evs, err := c.PoolEvents(ctx, pool)
		if err != nil {
			return
		}
		for _, e := range evs {
			switch e.Kind {
			case "scale-up":
				live++
			case "gone", "failed":
				live--
			}
		}
		if live <= 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
