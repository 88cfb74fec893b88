package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Containers on command (seed 003): the server takes the seed's message
// {command: deploy|delete|move|replicate, job, worker}, has the agents
// involved deploy and delete (over their sessions, through the same local
// API handlers `nodemgr container --agent-socket` uses), and keeps what the
// agents report back in the store, so `container ls` spans every node.

func (s *Server) containerRoutes() []route {
	return []route{
		{"GET", "/v1/containers", authUser, s.handleListContainers},
		{"POST", "/v1/containers", authUser, s.handleContainerCommand},
		{"GET", "/v1/containers/{id}", authUser, s.handleGetContainer},
		{"DELETE", "/v1/containers/{id}", authUser, s.handleDeleteContainer},
		{"GET", "/v1/containers/{id}/logs", authUser, s.handleContainerLogs},
	}
}

// containersReport stores what an agent says about its containers.
func (h *agentHandler) containersReport(ctx context.Context, body []byte) (any, error) {
	var rep api.ContainerReport
	if err := httpapi.DecodeStrict(body, &rep); err != nil {
		return nil, err
	}
	if err := h.s.store.PutContainers(ctx, h.sess.NodeID, rep.Containers); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// callAgent sends a local API request to a node's agent and decodes its
// JSON answer into out; an error answer comes back as that error.
func (s *Server) callAgent(ctx context.Context, n store.Node, method, path string, in, out any) error {
	req := api.LocalRequest{Method: method, Path: path}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		req.Body = b
	}
	resp, err := s.callLocal(ctx, n, req, forwardLongTimeout)
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

// deployOn deploys job on node n and records the agent's answer.
func (s *Server) deployOn(ctx context.Context, n store.Node, job api.ContainerJob) (api.Container, error) {
	var c api.Container
	if err := s.callAgent(ctx, n, http.MethodPost, "/v1/containers", job, &c); err != nil {
		return c, fmt.Errorf("deploy container %s on %s: %w", job.ID, n.Name, err)
	}
	c.Node = n.ID
	if err := s.store.PutContainers(ctx, n.ID, []api.Container{c}); err != nil {
		return c, err
	}
	c.NodeName = n.Name
	return c, nil
}

// deleteOn deletes job id on node n and records the result.
func (s *Server) deleteOn(ctx context.Context, n store.Node, id string) (api.Container, error) {
	var c api.Container
	if err := s.callAgent(ctx, n, http.MethodDelete, "/v1/containers/"+url.PathEscape(id), nil, &c); err != nil {
		return c, fmt.Errorf("delete container %s on %s: %w", id, n.Name, err)
	}
	c.Node = n.ID
	if err := s.store.PutContainers(ctx, n.ID, []api.Container{c}); err != nil {
		return c, err
	}
	c.NodeName = n.Name
	return c, nil
}

// findLive returns the node that runs job id now (or last ran it), after
// checking the caller holds role on it.
func (s *Server) findLive(ctx context.Context, id, role string) (api.Container, store.Node, error) {
	found, err := s.store.FindContainer(ctx, id)
	if err != nil {
		return api.Container{}, store.Node{}, err
	}
	c := found[0]
	n, err := s.resolveNode(ctx, c.Node, role)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return api.Container{}, store.Node{}, errdefs.NotFound("container %s (see nodemgr container ls)", id)
		}
		return api.Container{}, store.Node{}, err
	}
	c.NodeName = n.Name
	return c, n, nil
}

func (s *Server) handleContainerCommand(w http.ResponseWriter, r *http.Request) error {
	var cmd api.ContainerCommand
	if err := decodeJSON(r, &cmd); err != nil {
		return err
	}
	var (
		out []api.Container
		err error
	)
	switch cmd.Command {
	case api.ContainerDeploy:
		out, err = s.containerDeploy(r.Context(), cmd)
	case api.ContainerDelete:
		out, err = s.containerDelete(r.Context(), cmd.Job.ID)
	case api.ContainerMove:
		out, err = s.containerMove(r.Context(), cmd)
	case api.ContainerReplicate:
		out, err = s.containerReplicate(r.Context(), cmd)
	default:
		return errdefs.Field("command", "must be deploy, delete, move or replicate, got %q", cmd.Command)
	}
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// targets resolves the worker list of a command to nodes the caller may
// write to.
func (s *Server) targets(ctx context.Context, workers []string, what string) ([]store.Node, error) {
	if len(workers) == 0 {
		return nil, errdefs.Field("worker", "name the node(s) to %s on", what)
	}
	var nodes []store.Node
	for i, ref := range workers {
		n, err := s.resolveNode(ctx, ref, api.RoleWrite)
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
func (s *Server) containerDeploy(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	nodes, err := s.targets(ctx, cmd.Worker, "deploy")
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
		if found, err := s.store.FindContainer(ctx, jobs[i].ID); err == nil && !api.ContainerFinal(found[0].Status) {
			return nil, errdefs.Conflict("container %s already runs on node %s; delete it first or choose another id", jobs[i].ID, found[0].Node)
		}
	}
	var out []api.Container
	for i, n := range nodes {
		c, err := s.deployOn(ctx, n, jobs[i])
		if err != nil {
			s.undoDeploys(ctx, nodes[:i], out)
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
func (s *Server) undoDeploys(ctx context.Context, nodes []store.Node, made []api.Container) {
	for i, c := range made {
		if _, err := s.deleteOn(context.WithoutCancel(ctx), nodes[i], c.Job.ID); err != nil {
			s.log.Warn("undo a deploy that another node refused", "container", c.Job.ID, "node", nodes[i].Name, "err", err)
		}
	}
}

func (s *Server) containerDelete(ctx context.Context, id string) ([]api.Container, error) {
	if id == "" {
		return nil, errdefs.Field("job.id", "name the container to delete")
	}
	_, n, err := s.findLive(ctx, id, api.RoleWrite)
	if err != nil {
		return nil, err
	}
	c, err := s.deleteOn(ctx, n, id)
	if err != nil {
		return nil, err
	}
	return []api.Container{c}, nil
}

// containerMove deploys the job on the target first and deletes it from
// its node only once it runs there: a move that fails leaves it where it
// was.
func (s *Server) containerMove(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	if cmd.Job.ID == "" {
		return nil, errdefs.Field("job.id", "name the container to move")
	}
	cur, from, err := s.findLive(ctx, cmd.Job.ID, api.RoleWrite)
	if err != nil {
		return nil, err
	}
	if api.ContainerFinal(cur.Status) {
		return nil, errdefs.Conflict("container %s is %s on node %s; deploy it again instead of moving it", cmd.Job.ID, cur.Status, from.Name)
	}
	nodes, err := s.targets(ctx, cmd.Worker, "move")
	if err != nil {
		return nil, err
	}
	if len(nodes) != 1 {
		return nil, errdefs.Field("worker", "move takes one target node")
	}
	if nodes[0].ID == from.ID {
		return nil, errdefs.Field("worker", "container %s already runs on %s", cmd.Job.ID, from.Name)
	}
	moved, err := s.deployOn(ctx, nodes[0], cur.Job)
	if err != nil {
		return nil, fmt.Errorf("move container %s: %w (it still runs on %s)", cmd.Job.ID, err, from.Name)
	}
	old, err := s.deleteOn(ctx, from, cmd.Job.ID)
	if err != nil {
		return []api.Container{moved}, fmt.Errorf("move container %s: it runs on %s now, but deleting it on %s failed: %w; delete it there with nodemgr container delete", cmd.Job.ID, nodes[0].Name, from.Name, err)
	}
	return []api.Container{moved, old}, nil
}

// containerReplicate deploys copies of a job, each with an id of its own,
// on the target nodes.
func (s *Server) containerReplicate(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	if cmd.Job.ID == "" {
		return nil, errdefs.Field("job.id", "name the container to replicate")
	}
	cur, _, err := s.findLive(ctx, cmd.Job.ID, api.RoleRead)
	if err != nil {
		return nil, err
	}
	nodes, err := s.targets(ctx, cmd.Worker, "replicate")
	if err != nil {
		return nil, err
	}
	var out []api.Container
	for _, n := range nodes {
		job := cur.Job
		job.ID = newJobID()
		c, err := s.deployOn(ctx, n, job)
		if err != nil {
			return out, fmt.Errorf("replicate container %s: %w", cmd.Job.ID, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// newJobID makes a container job id: a DNS label, as the engine needs.
func newJobID() string { return strings.ToLower(auth.NewID("c-")) }

func (s *Server) handleListContainers(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.ContainerFilter{Live: q.Get("all") != "true"}
	if ref := q.Get("node"); ref != "" {
		n, err := s.resolveNode(r.Context(), ref, api.RoleRead)
		if err != nil {
			return err
		}
		f.NodeID = n.ID
	}
	pg, err := readPage(q, "containers", f.NodeID, strconv.FormatBool(f.Live))
	if err != nil {
		return err
	}
	// Node IDs the caller may read, with their names; absent: not yet asked.
	readable := map[string]*store.Node{}
	mayRead := func(c api.Container) bool {
		n, seen := readable[c.Node]
		if !seen {
			if got, err := s.resolveNode(r.Context(), c.Node, api.RoleRead); err == nil {
				n = &got
			}
			readable[c.Node] = n
		}
		return n != nil
	}
	cs, next, err := fillPage(pg, func(sp store.Page) ([]api.Container, error) {
		f.Page = sp
		return s.store.ListContainers(r.Context(), f)
	}, store.ContainerCursor, mayRead)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for i := range cs {
		if n := readable[cs[i].Node]; n != nil {
			cs[i].NodeName = n.Name
			cs[i] = asSeen(cs[i], *n)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, api.ContainerList{Containers: cs, Next: next})
	return nil
}

func (s *Server) handleGetContainer(w http.ResponseWriter, r *http.Request) error {
	c, n, err := s.findLive(r.Context(), r.PathValue("id"), api.RoleRead)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, asSeen(c, n))
	return nil
}

// asSeen is a container as the server can vouch for it: a job not yet
// ended on a node that is offline is UNKNOWN, its reason saying what was
// last reported, since it may have ended (or the machine with it) since.
// The store keeps the last report, which shows again once the node is back.
func asSeen(c api.Container, n store.Node) api.Container {
	if n.Status != api.StatusOffline || api.ContainerFinal(c.Status) {
		return c
	}
	c.Reason = fmt.Sprintf("node %s is offline; last reported %s", dispatch.NodeLabel(n.Name, n.ID), c.Status)
	c.Status, c.Usage = api.ContainerUnknown, nil
	return c
}

func (s *Server) handleDeleteContainer(w http.ResponseWriter, r *http.Request) error {
	out, err := s.containerDelete(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out[0])
	return nil
}

func (s *Server) handleContainerLogs(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	_, n, err := s.findLive(r.Context(), id, api.RoleRead)
	if err != nil {
		return err
	}
	tail := 200
	if v := r.URL.Query().Get("tail"); v != "" {
		if tail, err = strconv.Atoi(v); err != nil || tail < 0 {
			return errdefs.Field("tail", "must be a number of lines >= 0, got %q", v)
		}
	}
	q := url.Values{"tail": {strconv.Itoa(tail)}}
	if after := r.URL.Query().Get("after"); after != "" {
		q.Set("after", after)
	}
	req := api.LocalRequest{Method: http.MethodGet, Path: "/v1/containers/" + url.PathEscape(id) + "/logs", Query: q.Encode()}
	return s.relay(w, r, n, req, forwardTimeout)
}
