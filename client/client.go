// Package client is the Go client of the nodemgr REST API. The CLI uses it;
// so can users' own programs.
//
//	c := client.New("http://127.0.0.1:7070", os.Getenv("NODEMGR_TOKEN"))
//	nodes, err := c.Nodes(ctx, "")
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Client talks to one nodemgr server.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for the server at addr (a URL, or host:port meaning
// http://host:port) that authenticates with token.
func New(addr, token string) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &Client{base: strings.TrimRight(addr, "/"), token: token, http: &http.Client{Timeout: 60 * time.Second}}
}

// Error is an error answer from the server.
type Error struct {
	Status  int    // HTTP status
	Code    string // api error code: not_found, invalid, ...
	Message string
	Field   string // the input field at fault, for invalid
}

func (e *Error) Error() string { return e.Message }

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (when out is not nil).
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	if in == nil {
		return c.DoRaw(ctx, method, path, "", nil, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.DoRaw(ctx, method, path, "application/json", b, out)
}

// DoRaw sends a request whose body is already encoded (contentType says
// how; none when body is nil) and decodes a JSON answer into out.
func (c *Client) DoRaw(ctx context.Context, method, path, contentType string, in []byte, out any) error {
	var body io.Reader
	if in != nil {
		body = bytes.NewReader(in)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w (is the server running at %s? set --addr or NODEMGR_ADDR)", method, path, err, c.base)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error = api.Error{Code: "internal", Message: fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(b))}
		}
		return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Field: eb.Error.Field}
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// Health checks the server's liveness (no token needed).
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	return h, c.Do(ctx, http.MethodGet, "/healthz", nil, &h)
}

// Whoami returns the caller.
func (c *Client) Whoami(ctx context.Context) (api.User, error) {
	var u api.User
	return u, c.Do(ctx, http.MethodGet, "/v1/whoami", nil, &u)
}

// Nodes lists nodes, optionally only those with a status.
func (c *Client) Nodes(ctx context.Context, status string) ([]api.Node, error) {
	path := "/v1/nodes"
	if status != "" {
		path += "?status=" + url.QueryEscape(status)
	}
	var l api.NodeList
	return l.Nodes, c.Do(ctx, http.MethodGet, path, nil, &l)
}

// Node returns one node by ID, name or unique ID prefix.
func (c *Client) Node(ctx context.Context, ref string) (api.Node, error) {
	var n api.Node
	return n, c.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(ref), nil, &n)
}

// PatchNode changes a node's tags, labels or groups.
func (c *Client) PatchNode(ctx context.Context, ref string, p api.NodePatch) (api.Node, error) {
	var n api.Node
	return n, c.Do(ctx, http.MethodPatch, "/v1/nodes/"+url.PathEscape(ref), p, &n)
}

// DeleteNode forgets a node that is not connected.
func (c *Client) DeleteNode(ctx context.Context, ref string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(ref), nil, nil)
}

// ShutdownNode tells a node's agent to exit (api.ShutdownGraceful or api.ShutdownForce).
func (c *Client) ShutdownNode(ctx context.Context, ref, mode string) (api.Node, error) {
	var n api.Node
	return n, c.Do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(ref)+"/shutdown", api.ShutdownRequest{Mode: mode}, &n)
}

// Users lists users (admins only).
func (c *Client) Users(ctx context.Context) ([]api.User, error) {
	var l api.UserList
	return l.Users, c.Do(ctx, http.MethodGet, "/v1/users", nil, &l)
}

// CreateUser creates a user.
func (c *Client) CreateUser(ctx context.Context, r api.CreateUserRequest) (api.User, error) {
	var u api.User
	return u, c.Do(ctx, http.MethodPost, "/v1/users", r, &u)
}

// DeleteUser deletes a user and their tokens.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(name), nil, nil)
}

// SetRole sets a user's role in a group; role "" removes the membership.
func (c *Client) SetRole(ctx context.Context, user, group, role string) (api.User, error) {
	var u api.User
	return u, c.Do(ctx, http.MethodPut, "/v1/users/"+url.PathEscape(user)+"/groups/"+url.PathEscape(group),
		map[string]string{"role": role}, &u)
}

// Tokens lists API tokens.
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	var l api.TokenList
	return l.Tokens, c.Do(ctx, http.MethodGet, "/v1/tokens", nil, &l)
}

// CreateToken creates an API token; its Secret is set only in this answer.
func (c *Client) CreateToken(ctx context.Context, r api.CreateTokenRequest) (api.Token, error) {
	var t api.Token
	return t, c.Do(ctx, http.MethodPost, "/v1/tokens", r, &t)
}

// DeleteToken revokes an API token.
func (c *Client) DeleteToken(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil)
}

// JoinTokens lists join tokens.
func (c *Client) JoinTokens(ctx context.Context) ([]api.Token, error) {
	var l api.TokenList
	return l.Tokens, c.Do(ctx, http.MethodGet, "/v1/join-tokens", nil, &l)
}

// CreateJoinToken creates a join token for agents.
func (c *Client) CreateJoinToken(ctx context.Context, r api.CreateTokenRequest) (api.Token, error) {
	var t api.Token
	return t, c.Do(ctx, http.MethodPost, "/v1/join-tokens", r, &t)
}

// DeleteJoinToken revokes a join token.
func (c *Client) DeleteJoinToken(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/join-tokens/"+url.PathEscape(id), nil, nil)
}

// CreateSuite creates a task suite.
func (c *Client) CreateSuite(ctx context.Context, spec api.SuiteSpec) (api.Suite, error) {
	var s api.Suite
	return s, c.Do(ctx, http.MethodPost, "/v1/suites", spec, &s)
}

// Suites lists suites, optionally in one state.
func (c *Client) Suites(ctx context.Context, state string) ([]api.Suite, error) {
	path := "/v1/suites"
	if state != "" {
		path += "?state=" + url.QueryEscape(state)
	}
	var l api.SuiteList
	return l.Suites, c.Do(ctx, http.MethodGet, path, nil, &l)
}

// Suite returns a suite by ID or name.
func (c *Client) Suite(ctx context.Context, ref string) (api.Suite, error) {
	var s api.Suite
	return s, c.Do(ctx, http.MethodGet, "/v1/suites/"+url.PathEscape(ref), nil, &s)
}

// CloseSuite stops a suite taking tasks; it completes when the last ends.
func (c *Client) CloseSuite(ctx context.Context, ref string) (api.Suite, error) {
	var s api.Suite
	return s, c.Do(ctx, http.MethodPost, "/v1/suites/"+url.PathEscape(ref)+"/close", nil, &s)
}

// CancelSuite cancels a suite and its unfinished tasks.
func (c *Client) CancelSuite(ctx context.Context, ref string) (api.Suite, error) {
	var s api.Suite
	return s, c.Do(ctx, http.MethodPost, "/v1/suites/"+url.PathEscape(ref)+"/cancel", nil, &s)
}

// AssignSuite assigns a suite to nodes explicitly; none restores automatic assignment.
func (c *Client) AssignSuite(ctx context.Context, ref string, nodes []string) (api.Suite, error) {
	var s api.Suite
	if nodes == nil {
		nodes = []string{}
	}
	return s, c.Do(ctx, http.MethodPost, "/v1/suites/"+url.PathEscape(ref)+"/assign", map[string][]string{"nodes": nodes}, &s)
}

// SubmitTasks adds tasks to a suite, all or none, and returns their IDs.
func (c *Client) SubmitTasks(ctx context.Context, suite string, tasks []api.TaskSpec) ([]string, error) {
	var r api.SubmitResult
	return r.IDs, c.Do(ctx, http.MethodPost, "/v1/suites/"+url.PathEscape(suite)+"/tasks", api.SubmitTasks{Tasks: tasks}, &r)
}

// Tasks lists a suite's tasks: state filters, after and limit page.
func (c *Client) Tasks(ctx context.Context, suite, state, after string, limit int) ([]api.Task, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	path := "/v1/suites/" + url.PathEscape(suite) + "/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l api.TaskList
	return l.Tasks, c.Do(ctx, http.MethodGet, path, nil, &l)
}

// Task returns one task with its result and failures.
func (c *Client) Task(ctx context.Context, id string) (api.Task, error) {
	var t api.Task
	return t, c.Do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, &t)
}

// CancelTask cancels a Ready or Running task.
func (c *Client) CancelTask(ctx context.Context, id string) (api.Task, error) {
	var t api.Task
	return t, c.Do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil, &t)
}

// PutDocument stores a template ("templates") or mapping set ("mappings")
// from its YAML.
func (c *Client) PutDocument(ctx context.Context, plural, name string, yaml []byte) (api.Document, error) {
	var d api.Document
	return d, c.DoRaw(ctx, http.MethodPut, "/v1/"+plural+"/"+url.PathEscape(name), "application/yaml", yaml, &d)
}

// Document reads a stored template or mapping set.
func (c *Client) Document(ctx context.Context, plural, name string) (api.Document, error) {
	var d api.Document
	return d, c.Do(ctx, http.MethodGet, "/v1/"+plural+"/"+url.PathEscape(name), nil, &d)
}

// Documents lists templates or mapping sets.
func (c *Client) Documents(ctx context.Context, plural string) ([]api.Document, error) {
	var l api.DocumentList
	return l.Items, c.Do(ctx, http.MethodGet, "/v1/"+plural, nil, &l)
}

// DeleteDocument removes a template or mapping set.
func (c *Client) DeleteDocument(ctx context.Context, plural, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/"+plural+"/"+url.PathEscape(name), nil, nil)
}

// Render returns the Extra map a provider gets for a template.
func (c *Client) Render(ctx context.Context, name, provider string) (api.Rendered, error) {
	var r api.Rendered
	return r, c.Do(ctx, http.MethodGet, "/v1/templates/"+url.PathEscape(name)+"/render?provider="+url.QueryEscape(provider), nil, &r)
}

// Provision asks for machines; they come back pending and the server
// provisions them in the background.
func (c *Client) Provision(ctx context.Context, r api.ProvisionRequest) ([]api.Deployment, error) {
	var l api.DeploymentList
	return l.Deployments, c.Do(ctx, http.MethodPost, "/v1/deployments", r, &l)
}

// Deployments lists deployments, optionally in some states (comma-separated).
func (c *Client) Deployments(ctx context.Context, states string) ([]api.Deployment, error) {
	path := "/v1/deployments"
	if states != "" {
		path += "?state=" + url.QueryEscape(states)
	}
	var l api.DeploymentList
	return l.Deployments, c.Do(ctx, http.MethodGet, path, nil, &l)
}

// Deployment returns one deployment by ID or live name.
func (c *Client) Deployment(ctx context.Context, ref string) (api.Deployment, error) {
	var d api.Deployment
	return d, c.Do(ctx, http.MethodGet, "/v1/deployments/"+url.PathEscape(ref), nil, &d)
}

// DestroyDeployment removes a machine.
func (c *Client) DestroyDeployment(ctx context.Context, ref string) (api.Deployment, error) {
	var d api.Deployment
	return d, c.Do(ctx, http.MethodDelete, "/v1/deployments/"+url.PathEscape(ref), nil, &d)
}

// Lifecycle performs start, stop, hibernate, reboot or terminate.
func (c *Client) Lifecycle(ctx context.Context, ref, verb string) (api.Deployment, error) {
	var d api.Deployment
	return d, c.Do(ctx, http.MethodPost, "/v1/deployments/"+url.PathEscape(ref)+"/lifecycle/"+url.PathEscape(verb), nil, &d)
}
