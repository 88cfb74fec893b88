package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	nmclient "github.com/nodemgr/nodemgr/client"
)

// ProvisionConfig sets up the provisioning harness.
type ProvisionConfig struct {
	Binary     string // nodemgr binary for the server
	Image      string // image on the engine (no registry is reachable)
	Runs       int    // serial rounds per side
	Parallel   int    // machines provisioned at once
	DockerHost string // "" for the default engine
}

// ProvisionResult compares nodemgr with the bare engine, measured
// interleaved in one run.
type ProvisionResult struct {
	Runs         int           `json:"runs"`
	NodemgrP50   time.Duration `json:"nodemgr_p50"`
	NodemgrP90   time.Duration `json:"nodemgr_p90"`
	EngineP50    time.Duration `json:"engine_p50"`
	EngineP90    time.Duration `json:"engine_p90"`
	Parallel     int           `json:"parallel"`
	NodemgrBatch time.Duration `json:"nodemgr_parallel"` // until all are running
	EngineBatch  time.Duration `json:"engine_parallel"`  // create+start all at once
}

// RunProvision times, through a real server process, provisioning a docker
// machine, running `true` in it and destroying it, against `docker run --rm
// IMAGE true` (create, start, wait, remove) on the same engine, the two
// interleaved round by round; then Parallel machines at once on each side.
func RunProvision(ctx context.Context, cfg ProvisionConfig, progress io.Writer) (ProvisionResult, error) {
	opts := []client.Opt{client.FromEnv}
	if cfg.DockerHost != "" {
		opts = append(opts, client.WithHost(cfg.DockerHost))
	}
	eng, err := client.New(opts...)
	if err != nil {
		return ProvisionResult{}, fmt.Errorf("docker engine: %w", err)
	}
	defer eng.Close()
	if _, err := eng.ImageInspect(ctx, cfg.Image); err != nil {
		return ProvisionResult{}, fmt.Errorf("image %s is not on the engine (%v): no registry is used; import one, e.g. `tar -C rootfs -c . | docker import - %s`", cfg.Image, err, cfg.Image)
	}
	var args []string
	if cfg.DockerHost != "" {
		args = append(args, "--docker-host", cfg.DockerHost)
	}
	srv, err := startServer(ctx, cfg.Binary, append(args, "--drift-interval", "1h")...)
	if err != nil {
		return ProvisionResult{}, err
	}
	defer srv.stop()
	c := nmclient.New(srv.addr, srv.token)
	tmpl := fmt.Sprintf("name: bench-node\nimage: %q\n", cfg.Image)
	if _, err := c.PutDocument(ctx, "templates", "bench-node", []byte(tmpl)); err != nil {
		return ProvisionResult{}, err
	}

	res := ProvisionResult{Runs: cfg.Runs, Parallel: cfg.Parallel}
	var ours, theirs []time.Duration
	for i := range cfg.Runs {
		d, err := nodemgrRound(ctx, c, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano()%1e6, i))
		if err != nil {
			return res, err
		}
		ours = append(ours, d)
		if d, err = engineRound(ctx, eng, cfg.Image); err != nil {
			return res, err
		}
		theirs = append(theirs, d)
		fmt.Fprintf(progress, "\r  round %d/%d", i+1, cfg.Runs)
	}
	fmt.Fprintln(progress)
	res.NodemgrP50, res.NodemgrP90 = pct(ours, 50), pct(ours, 90)
	res.EngineP50, res.EngineP90 = pct(theirs, 50), pct(theirs, 90)

	fmt.Fprintf(progress, "  %d machines at once\n", cfg.Parallel)
	if res.NodemgrBatch, err = nodemgrBatch(ctx, c, cfg.Parallel); err != nil {
		return res, err
	}
	if res.EngineBatch, err = engineBatch(ctx, eng, cfg.Image, cfg.Parallel); err != nil {
		return res, err
	}
	return res, nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// nodemgrRound provisions one machine, runs true in it and destroys it.
func nodemgrRound(ctx context.Context, c *nmclient.Client, name string) (time.Duration, error) {
	start := time.Now()
	deps, err := c.Provision(ctx, api.ProvisionRequest{Template: "bench-node", Provider: "docker", Name: name})
	if err != nil {
		return 0, err
	}
	d, err := waitRunning(ctx, c, deps[0].ID)
	if err != nil {
		return 0, err
	}
	code, err := c.Exec(ctx, d.ID, api.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard)
	if err != nil || code != 0 {
		return 0, fmt.Errorf("exec true in %s = %d, %v", d.Name, code, err)
	}
	if _, err := c.DestroyDeployment(ctx, d.ID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func waitRunning(ctx context.Context, c *nmclient.Client, id string) (api.Deployment, error) {
	for {
		d, err := c.Deployment(ctx, id)
		if err != nil {
			return d, err
		}
		switch d.State {
		case "running":
			return d, nil
		case "pending":
		default:
			return d, fmt.Errorf("deployment %s is %s: %s", d.Name, d.State, d.StateReason)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// engineRound is `docker run --rm IMAGE true` through the engine API.
func engineRound(ctx context.Context, eng *client.Client, image string) (time.Duration, error) {
	start := time.Now()
	id, err := engineStart(ctx, eng, image, []string{"true"})
	if err != nil {
		return 0, err
	}
	w := eng.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		if r.StatusCode != 0 {
			return 0, fmt.Errorf("true exited %d", r.StatusCode)
		}
	case err := <-w.Error:
		return 0, err
	}
	if _, err := eng.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func engineStart(ctx context.Context, eng *client.Client, image string, cmd []string) (string, error) {
	res, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: image, Cmd: cmd, Labels: map[string]string{"nodemgr.bench": "1"}},
	})
	if err != nil {
		return "", err
	}
	if _, err := eng.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		eng.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
		return "", err
	}
	return res.ID, nil
}

// nodemgrBatch provisions n machines in one request and times until all
// run; then destroys them.
func nodemgrBatch(ctx context.Context, c *nmclient.Client, n int) (time.Duration, error) {
	start := time.Now()
	deps, err := c.Provision(ctx, api.ProvisionRequest{Template: "bench-node", Provider: "docker", Count: n,
		Name: fmt.Sprintf("batch-%d", time.Now().UnixNano()%1e6)})
	if err != nil {
		return 0, err
	}
	for _, d := range deps {
		if _, err := waitRunning(ctx, c, d.ID); err != nil {
			return 0, err
		}
	}
	took := time.Since(start)
	for _, d := range deps {
		c.DestroyDeployment(ctx, d.ID)
	}
	return took, nil
}

// engineBatch creates and starts n long-running containers at once.
func engineBatch(ctx context.Context, eng *client.Client, image string, n int) (time.Duration, error) {
	start := time.Now()
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = engineStart(ctx, eng, image, []string{"sleep", "3600"})
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, id := range ids {
		if id != "" {
			eng.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		}
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return took, nil
}
