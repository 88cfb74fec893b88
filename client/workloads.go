package client

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
)

// Artifacts and services live on nodes. Through a server, every method
// takes the node (ID, name or unique prefix); a client made with NewAgent
// talks to one agent's local API directly and takes node "".

// NewAgent returns a client for an agent's local API on its unix socket
// (the agent's data dir holds agent.sock).
func NewAgent(socket string) *Client {
	t := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	c := New("http://agent", "")
	c.http.Transport, c.stream.Transport = t, t
	c.socket = socket
	return c
}

// nodePath is the path of a node's resource: on the server under
// /v1/nodes/{node}, on an agent's local API at the top.
func nodePath(node, rest string) string {
	if node == "" {
		return "/v1" + rest
	}
	return "/v1/nodes/" + url.PathEscape(node) + rest
}

// AgentStatus returns a local agent's status (NewAgent clients only).
func (c *Client) AgentStatus(ctx context.Context) (api.AgentStatus, error) {
	return call[api.AgentStatus](ctx, c, http.MethodGet, "/v1/status", nil)
}

// Artifacts lists the artifacts installed on node.
func (c *Client) Artifacts(ctx context.Context, node string) ([]api.Artifact, error) {
	return callList[api.Artifact](ctx, c, http.MethodGet, nodePath(node, "/artifacts"), "artifacts", nil)
}

// InstallArtifact installs id (group:artifact:version) on node and waits
// until it is installed.
func (c *Client) InstallArtifact(ctx context.Context, node, id string) (api.Artifact, error) {
	return callLong[api.Artifact](ctx, c, http.MethodPost, nodePath(node, "/artifacts"), api.ArtifactInstall{ID: id})
}

// Artifact returns one installed artifact.
func (c *Client) Artifact(ctx context.Context, node, id string) (api.Artifact, error) {
	return call[api.Artifact](ctx, c, http.MethodGet, nodePath(node, "/artifacts/"+url.PathEscape(id)), nil)
}

// RemoveArtifact uninstalls id from node; it is refused while a service
// (running or stopped) uses it.
func (c *Client) RemoveArtifact(ctx context.Context, node, id string) error {
	return c.Do(ctx, http.MethodDelete, nodePath(node, "/artifacts/"+url.PathEscape(id)), nil, nil)
}

// ForceRemoveArtifact uninstalls id from node even while services use it;
// they cannot start again until it is installed again.
func (c *Client) ForceRemoveArtifact(ctx context.Context, node, id string) error {
	return c.Do(ctx, http.MethodDelete, nodePath(node, "/artifacts/"+url.PathEscape(id)+"?force=true"), nil, nil)
}

// Services lists node's services with their live status.
func (c *Client) Services(ctx context.Context, node string) ([]api.Service, error) {
	return callList[api.Service](ctx, c, http.MethodGet, nodePath(node, "/services"), "services", nil)
}

// Service returns one service.
func (c *Client) Service(ctx context.Context, node, coordinate string) (api.Service, error) {
	return call[api.Service](ctx, c, http.MethodGet, nodePath(node, "/services/"+url.PathEscape(coordinate)), nil)
}

// StartService starts a service on node.
func (c *Client) StartService(ctx context.Context, node string, spec api.ServiceSpec) (api.Service, error) {
	return callLong[api.Service](ctx, c, http.MethodPost, nodePath(node, "/services"), spec)
}

// ServiceAction stops, drains or restarts a service and waits until done.
func (c *Client) ServiceAction(ctx context.Context, node, coordinate, action string) (api.Service, error) {
	return callLong[api.Service](ctx, c, http.MethodPost, nodePath(node, "/services/"+url.PathEscape(coordinate)+"/"+url.PathEscape(action)), nil)
}

// RemoveService forgets a service that is not running; purge deletes its
// runtime dir too.
func (c *Client) RemoveService(ctx context.Context, node, coordinate string, purge bool) error {
	return c.Do(ctx, http.MethodDelete, nodePath(node, "/services/"+url.PathEscape(coordinate)+"?purge="+strconv.FormatBool(purge)), nil, nil)
}

// ServiceLogs returns the last tail bytes of a service's log.
func (c *Client) ServiceLogs(ctx context.Context, node, coordinate string, tail int64) ([]byte, error) {
	b, _, err := c.ServiceLogTail(ctx, node, coordinate, tail)
	return b, err
}

// ServiceLogTail returns the last tail bytes of a service's log and the
// cursor where they end, to follow the log with ServiceLogAfter.
func (c *Client) ServiceLogTail(ctx context.Context, node, coordinate string, tail int64) ([]byte, string, error) {
	return c.logPiece(ctx, nodePath(node, "/services/"+url.PathEscape(coordinate)+"/logs?tail="+strconv.FormatInt(tail, 10)))
}

// ServiceLogAfter returns what a service's log holds after cursor (all of
// it again if the log was rotated since), up to 512 KiB, and the cursor
// where that ends.
func (c *Client) ServiceLogAfter(ctx context.Context, node, coordinate, cursor string) ([]byte, string, error) {
	return c.logPiece(ctx, nodePath(node, "/services/"+url.PathEscape(coordinate)+"/logs?after="+url.QueryEscape(cursor)))
}

// logPiece GETs a piece of a log and the cursor where it ends ("" from an
// agent too old to give one).
func (c *Client) logPiece(ctx context.Context, path string) ([]byte, string, error) {
	resp, err := c.textResponse(ctx, path)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	return b, resp.Header.Get(api.HeaderLogCursor), nil
}

// text GETs a plain-text answer (logs), however long it takes.
func (c *Client) text(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.textResponse(ctx, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func (c *Client) textResponse(ctx context.Context, path string) (*http.Response, error) {
	req, err := c.request(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return nil, err
	}
	return c.streamDo(req)
}

// long sends a JSON request whose answer may take minutes (downloads,
// drains): no timeout but ctx.
func (c *Client) long(ctx context.Context, method, path string, in, out any) error {
	return c.sendJSON(ctx, c.stream, method, path, in, out)
}

// callLong is call for an answer that may take minutes (see long).
func callLong[T any](ctx context.Context, c *Client, method, path string, in any) (T, error) {
	var out T
	err := c.long(ctx, method, path, in, &out)
	return out, err
}

// ContainerCommand sends the seed's container message (deploy, delete,
// move, replicate) to the server and returns the containers it touched.
func (c *Client) ContainerCommand(ctx context.Context, cmd api.ContainerCommand) ([]api.Container, error) {
	raw, err := callLong[json.RawMessage](ctx, c, http.MethodPost, "/v1/containers", cmd)
	if err != nil {
		return nil, err
	}
	return api.DecodeList[api.Container](raw, "containers")
}

// DeployContainer deploys job on node (through a server), or on the agent
// a NewAgent client talks to (node "").
func (c *Client) DeployContainer(ctx context.Context, node string, job api.ContainerJob) (api.Container, error) {
	if c.socket != "" {
		return callLong[api.Container](ctx, c, http.MethodPost, "/v1/containers", job)
	}
	cs, err := c.ContainerCommand(ctx, api.ContainerCommand{Command: api.ContainerDeploy, Job: job, Worker: []string{node}})
	if err != nil {
		return api.Container{}, err
	}
	return cs[0], nil
}

// Containers lists containers: live ones, or all with all; on one node
// when node is not "" (server only).
func (c *Client) Containers(ctx context.Context, node string, all bool) ([]api.Container, error) {
	return allPages[api.Container](ctx, func(ctx context.Context, p Page) (api.ContainerList, error) {
		return c.ContainersPage(ctx, node, all, p)
	})
}

// ContainersPage lists one page of container jobs. An agent's local API
// answers them all in one page.
func (c *Client) ContainersPage(ctx context.Context, node string, all bool, p Page) (api.ContainerList, error) {
	q := filter("node", node)
	if all {
		q.Set("all", "true")
	}
	return call[api.ContainerList](ctx, c, http.MethodGet, withQuery("/v1/containers", p.values(q)), nil)
}

// Container returns one container job.
func (c *Client) Container(ctx context.Context, id string) (api.Container, error) {
	return call[api.Container](ctx, c, http.MethodGet, "/v1/containers/"+url.PathEscape(id), nil)
}

// DeleteContainer stops and removes a container job's container.
func (c *Client) DeleteContainer(ctx context.Context, id string) (api.Container, error) {
	return callLong[api.Container](ctx, c, http.MethodDelete, "/v1/containers/"+url.PathEscape(id), nil)
}

// ContainerLogs returns the last tail lines of a container's output.
func (c *Client) ContainerLogs(ctx context.Context, id string, tail int) ([]byte, error) {
	b, _, err := c.ContainerLogTail(ctx, id, tail)
	return b, err
}

// ContainerLogTail returns the last tail lines of a container's output (0:
// all) and the cursor where they end, to follow it with ContainerLogAfter.
func (c *Client) ContainerLogTail(ctx context.Context, id string, tail int) ([]byte, string, error) {
	return c.logPiece(ctx, "/v1/containers/"+url.PathEscape(id)+"/logs?tail="+strconv.Itoa(tail))
}

// ContainerLogAfter returns a container's output after cursor, up to
// 512 KiB, and the cursor where that ends.
func (c *Client) ContainerLogAfter(ctx context.Context, id, cursor string) ([]byte, string, error) {
	return c.logPiece(ctx, "/v1/containers/"+url.PathEscape(id)+"/logs?after="+url.QueryEscape(cursor))
}

// Resources returns node's books: onboarding, committed, allocated, free.
func (c *Client) Resources(ctx context.Context, node string) (api.NodeResources, error) {
	return call[api.NodeResources](ctx, c, http.MethodGet, nodePath(node, "/resources"), nil)
}

// Onboard offers share percent (10-90) of node's machine to workloads.
func (c *Client) Onboard(ctx context.Context, node string, share int) (api.Onboarding, error) {
	return call[api.Onboarding](ctx, c, http.MethodPost, nodePath(node, "/onboard"), api.OnboardRequest{SharePercent: share})
}

// Offboard withdraws node's offer; force lets the workloads that run keep
// their allocations until they end.
func (c *Client) Offboard(ctx context.Context, node string, force bool) error {
	return c.Do(ctx, http.MethodPost, nodePath(node, "/offboard?force="+strconv.FormatBool(force)), nil, nil)
}

// Allocations lists the workloads holding node's resources.
func (c *Client) Allocations(ctx context.Context, node string) ([]api.Allocation, error) {
	return callList[api.Allocation](ctx, c, http.MethodGet, nodePath(node, "/allocations"), "allocations", nil)
}

// Allocation returns one allocation.
func (c *Client) Allocation(ctx context.Context, node, id string) (api.Allocation, error) {
	return call[api.Allocation](ctx, c, http.MethodGet, nodePath(node, "/allocations/"+url.PathEscape(id)), nil)
}

// AllocationAction stops or restarts the workload behind an allocation.
func (c *Client) AllocationAction(ctx context.Context, node, id, action string) (api.Allocation, error) {
	return callLong[api.Allocation](ctx, c, http.MethodPost, nodePath(node, "/allocations/"+url.PathEscape(id)+"/"+url.PathEscape(action)), nil)
}

// AllocationLogs returns the log of the workload behind an allocation.
func (c *Client) AllocationLogs(ctx context.Context, node, id string) ([]byte, error) {
	return c.text(ctx, nodePath(node, "/allocations/"+url.PathEscape(id)+"/logs"))
}

// Commit locks resources and ports on node for a workload about to be
// placed; a container job naming the commitment is allocated from it.
func (c *Client) Commit(ctx context.Context, node string, req api.CommitRequest) (api.Commitment, error) {
	return call[api.Commitment](ctx, c, http.MethodPost, nodePath(node, "/commitments"), req)
}

// Release gives a commitment's resources back.
func (c *Client) Release(ctx context.Context, node, id string) error {
	return c.Do(ctx, http.MethodDelete, nodePath(node, "/commitments/"+url.PathEscape(id)), nil, nil)
}
