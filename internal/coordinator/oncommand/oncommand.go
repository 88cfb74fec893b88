// Package oncommand runs containers on command (seed 003): deploy, delete,
// move and replicate a job on the nodes a command names, through each
// node's agent and its local container API, and keeps what the agents
// answer in the store, so that container ls spans every node.
package oncommand

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Config tunes the commands.
type Config struct {
	CallTimeout time.Duration // how long an agent has to answer one call
}

// Store is what the commands need of the store.
type Store interface {
	FindContainer(ctx context.Context, id string) ([]api.Container, error)
	PutContainers(ctx context.Context, nodeID string, cs []api.Container) error
}

// Hooks are what the commands ask of the server.
type Hooks struct {
	// CallLocal makes a request of node n's agent's local API.
	CallLocal func(ctx context.Context, n store.Node, req api.LocalRequest, timeout time.Duration) (api.LocalResponse, error)
	// Resolve finds the node ref (an ID or a name) that the caller,
	// whose principal is in ctx, holds role on.
	Resolve func(ctx context.Context, ref, role string) (store.Node, error)
}

// Commander runs container commands.
type Commander struct {
	cfg   Config
	store Store
	hooks Hooks
	log   *slog.Logger
}

// New makes a Commander.
func New(cfg Config, st Store, hooks Hooks, logger *slog.Logger) *Commander {
	return &Commander{cfg: cfg, store: st, hooks: hooks, log: logger}
}

// Run runs a container command and returns the containers it made or
// changed.
func (cm *Commander) Run(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	switch cmd.Command {
	case api.ContainerDeploy:
		return cm.containerDeploy(ctx, cmd)
	case api.ContainerDelete:
		return cm.Delete(ctx, cmd.Job.ID)
	case api.ContainerMove:
		return cm.containerMove(ctx, cmd)
	case api.ContainerReplicate:
		return cm.containerReplicate(ctx, cmd)
	}
	return nil, errdefs.Field("command", "must be deploy, delete, move or replicate, got %q", cmd.Command)
}

// CallAgent sends a local API request to a node's agent and decodes its
// JSON answer into out; an error answer comes back as that error.
func (cm *Commander) CallAgent(ctx context.Context, n store.Node, method, path string, in, out any) error {
	req := api.LocalRequest{Method: method, Path: path}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		req.Body = b
	}
	resp, err := cm.hooks.CallLocal(ctx, n, req, cm.cfg.CallTimeout)
	if err != nil {
		return err
	}
	if resp.Status >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(resp.Body, &eb) != nil || eb.Error.Message == "" {
			return fmt.Errorf("node %s answered HTTP %d: %s", n.Name, resp.Status, resp.Body)
		}
		return fmt.Errorf("node %s: %w", n.Name, errdefs.FromAPI(eb.Error))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Body, out)
}

// DeployOn deploys job on node n and records the agent's answer.
func (cm *Commander) DeployOn(ctx context.Context, n store.Node, job api.ContainerJob) (api.Container, error) {
	var c api.Container
	if err := cm.CallAgent(ctx, n, http.MethodPost, "/v1/containers", job, &c); err != nil {
		return c, fmt.Errorf("deploy container %s on %s: %w", job.ID, n.Name, err)
	}
	c.Node = n.ID
	if err := cm.store.PutContainers(ctx, n.ID, []api.Container{c}); err != nil {
		return c, err
	}
	c.NodeName = n.Name
	return c, nil
}

// DeleteOn deletes job id on node n and records the result.
func (cm *Commander) DeleteOn(ctx context.Context, n store.Node, id string) (api.Container, error) {
	var c api.Container
	if err := cm.CallAgent(ctx, n, http.MethodDelete, "/v1/containers/"+url.PathEscape(id), nil, &c); err != nil {
		return c, fmt.Errorf("delete container %s on %s: %w", id, n.Name, err)
	}
	c.Node = n.ID
	if err := cm.store.PutContainers(ctx, n.ID, []api.Container{c}); err != nil {
		return c, err
	}
	c.NodeName = n.Name
	return c, nil
}

// FindLive returns the node that runs job id now (or last ran it), after
// checking the caller holds role on it.
func (cm *Commander) FindLive(ctx context.Context, id, role string) (api.Container, store.Node, error) {
	found, err := cm.store.FindContainer(ctx, id)
	if err != nil {
		return api.Container{}, store.Node{}, err
	}
	c := found[0]
	n, err := cm.hooks.Resolve(ctx, c.Node, role)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return api.Container{}, store.Node{}, errdefs.NotFound("container %s (see nodemgr container ls)", id)
		}
		return api.Container{}, store.Node{}, err
	}
	c.NodeName = n.Name
	return c, n, nil
}

// targets resolves the worker list of a command to nodes the caller may
// write to.
func (cm *Commander) targets(ctx context.Context, workers []string, what string) ([]store.Node, error) {
	if len(workers) == 0 {
		return nil, errdefs.Field("worker", "name the node(s) to %s on", what)
	}
	var nodes []store.Node
	for i, ref := range workers {
		n, err := cm.hooks.Resolve(ctx, ref, api.RoleWrite)
		if err != nil {
			return nil, fmt.Errorf("worker[%d]: %w", i, err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// containerDeploy deploys the job on each node the worker list names (the
// seed's message names a list), all or nothing: if one deploy fails, those
// already made are deleted again. With one worker the container keeps the
// job's ID; with several each gets the ID with "-" and its node's name.
// The seed's cluster field is accepted and not used: one nodemgr server
// is one cluster.
func (cm *Commander) containerDeploy(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	nodes, err := cm.targets(ctx, cmd.Worker, "deploy")
	if err != nil {
		return nil, err
	}
	if seen := map[string]bool{}; len(nodes) > 1 {
		for i, n := range nodes {
			if seen[n.ID] {
				return nil, errdefs.Field(fmt.Sprintf("worker[%d]", i), "node %s is named twice", n.Name)
			}
			seen[n.ID] = true
		}
	}
	jobs := make([]api.ContainerJob, len(nodes))
	for i, n := range nodes {
		jobs[i] = cmd.Job
		switch {
		case cmd.Job.ID == "":
			jobs[i].ID = newJobID()
		case len(nodes) > 1:
			jobs[i].ID = cmd.Job.ID + "-" + strings.ToLower(n.Name)
		}
		if found, err := cm.store.FindContainer(ctx, jobs[i].ID); err == nil && !api.ContainerFinal(found[0].Status) {
			return nil, errdefs.Conflict("container %s already runs on node %s; delete it first or choose another id", jobs[i].ID, found[0].Node)
		}
	}
	var out []api.Container
	for i, n := range nodes {
		c, err := cm.DeployOn(ctx, n, jobs[i])
		if err != nil {
			cm.undoDeploys(ctx, nodes[:i], out)
			if len(nodes) > 1 {
				return nil, fmt.Errorf("worker[%d] (%s): %w; the %d container(s) already deployed were deleted again", i, n.Name, err, len(out))
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// undoDeploys deletes the containers a failed multi-node deploy made.
func (cm *Commander) undoDeploys(ctx context.Context, nodes []store.Node, made []api.Container) {
	for i, c := range made {
		if _, err := cm.DeleteOn(context.WithoutCancel(ctx), nodes[i], c.Job.ID); err != nil {
			cm.log.Warn("undo a deploy that another node refused", "container", c.Job.ID, "node", nodes[i].Name, "err", err)
		}
	}
}

// Delete deletes the container id where it runs.
func (cm *Commander) Delete(ctx context.Context, id string) ([]api.Container, error) {
	if id == "" {
		return nil, errdefs.Field("job.id", "name the container to delete")
	}
	_, n, err := cm.FindLive(ctx, id, api.RoleWrite)
	if err != nil {
		return nil, err
	}
	c, err := cm.DeleteOn(ctx, n, id)
	if err != nil {
		return nil, err
	}
	return []api.Container{c}, nil
}

// containerMove deploys the job on the target first and deletes it from
// its node only once it runs there: a move that fails leaves it where it
// was.
func (cm *Commander) containerMove(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	if cmd.Job.ID == "" {
		return nil, errdefs.Field("job.id", "name the container to move")
	}
	cur, from, err := cm.FindLive(ctx, cmd.Job.ID, api.RoleWrite)
	if err != nil {
		return nil, err
	}
	if api.ContainerFinal(cur.Status) {
		return nil, errdefs.Conflict("container %s is %s on node %s; deploy it again instead of moving it", cmd.Job.ID, cur.Status, from.Name)
	}
	nodes, err := cm.targets(ctx, cmd.Worker, "move")
	if err != nil {
		return nil, err
	}
	if len(nodes) != 1 {
		return nil, errdefs.Field("worker", "move takes one target node")
	}
	if nodes[0].ID == from.ID {
		return nil, errdefs.Field("worker", "container %s already runs on %s", cmd.Job.ID, from.Name)
	}
	moved, err := cm.DeployOn(ctx, nodes[0], cur.Job)
	if err != nil {
		return nil, fmt.Errorf("move container %s: %w (it still runs on %s)", cmd.Job.ID, err, from.Name)
	}
	old, err := cm.DeleteOn(ctx, from, cmd.Job.ID)
	if err != nil {
		return []api.Container{moved}, fmt.Errorf("move container %s: it runs on %s now, but deleting it on %s failed: %w; delete it there with nodemgr container delete", cmd.Job.ID, nodes[0].Name, from.Name, err)
	}
	return []api.Container{moved, old}, nil
}

// containerReplicate deploys copies of a job, each with an id of its own,
// on the target nodes.
func (cm *Commander) containerReplicate(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	if cmd.Job.ID == "" {
		return nil, errdefs.Field("job.id", "name the container to replicate")
	}
	cur, _, err := cm.FindLive(ctx, cmd.Job.ID, api.RoleRead)
	if err != nil {
		return nil, err
	}
	nodes, err := cm.targets(ctx, cmd.Worker, "replicate")
	if err != nil {
		return nil, err
	}
	var out []api.Container
	for _, n := range nodes {
		job := cur.Job
		job.ID = newJobID()
		c, err := cm.DeployOn(ctx, n, job)
		if err != nil {
			return out, fmt.Errorf("replicate container %s: %w", cmd.Job.ID, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// newJobID makes a container job id: a DNS label, as the engine needs.
func newJobID() string { return strings.ToLower(auth.NewID("c-")) }

// AsSeen is a container as the server can vouch for it: a job not yet
// ended on a node that is offline is UNKNOWN, its reason saying what was
// last reported, since it may have ended (or the machine with it) since.
// The store keeps the last report, which shows again once the node is back.
func AsSeen(c api.Container, n store.Node) api.Container {
	if n.Status != api.StatusOffline || api.ContainerFinal(c.Status) {
		return c
	}
	c.Reason = fmt.Sprintf("node %s is offline; last reported %s", dispatch.NodeLabel(n.Name, n.ID), c.Status)
	c.Status, c.Usage = api.ContainerUnknown, nil
	return c
}
