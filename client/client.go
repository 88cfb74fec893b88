// Package client is the Go client of the nodemgr REST API. The CLI uses it;
// so can users' own programs.
//
//	c := client.New("http://127.0.0.1:7070", os.Getenv("NODEMGR_TOKEN"))
//	nodes, err := c.Nodes(ctx, "")
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// Client talks to one nodemgr server.
type Client struct {
	base  string
	token string
	http  *http.Client
	// stream carries answers that last as long as a command or a copy
	// does: no overall timeout, only the caller's context.
	stream *http.Client
	socket string // set for an agent's local API (NewAgent)
	// insecureHTTP lets the token go over plain HTTP beyond loopback
	// (AllowInsecureHTTP).
	insecureHTTP bool
}

// New returns a client for the server at addr (a URL, or host:port meaning
// http://host:port) that authenticates with token.
func New(addr, token string, opts ...Option) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	c := &Client{base: strings.TrimRight(addr, "/"), token: token, http: &http.Client{Timeout: 60 * time.Second}, stream: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Option configures a Client.
type Option func(*Client)

// WithRootCAs verifies the server's certificate against the CAs in roots
// instead of the system's: for a server with a CA of its own, whose
// certificate is DATA_DIR/ca.crt on the server.
//
//	certs, _ := os.ReadFile("ca.crt")
//	roots := x509.NewCertPool()
//	roots.AppendCertsFromPEM(certs)
//	c := client.New("https://nodemgr.example:7070", token, client.WithRootCAs(roots))
func WithRootCAs(roots *x509.CertPool) Option {
	return func(c *Client) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		c.http.Transport, c.stream.Transport = t, t
	}
}

// AllowInsecureHTTP lets the client send its token over plain http:// to an
// address other than loopback, where anyone on the path can read it. By
// default such a request fails before anything is dialled, with a
// *cleartext.Error that says to use https://.
func AllowInsecureHTTP() Option {
	return func(c *Client) { c.insecureHTTP = true }
}

// insecureSetting names AllowInsecureHTTP in the refusal; the CLI says
// --insecure-http instead.
const insecureSetting = "client.AllowInsecureHTTP()"

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
	return c.sendJSON(ctx, c.http, method, path, in, out)
}

// DoRaw sends a request whose body is already encoded (contentType says
// how; none when body is nil) and decodes a JSON answer into out.
func (c *Client) DoRaw(ctx context.Context, method, path, contentType string, in []byte, out any) error {
	return c.send(ctx, c.http, method, path, contentType, in, out)
}

// sendJSON is send with in, if not nil, encoded as JSON.
func (c *Client) sendJSON(ctx context.Context, hc *http.Client, method, path string, in, out any) error {
	if in == nil {
		return c.send(ctx, hc, method, path, "", nil, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.send(ctx, hc, method, path, "application/json", b, out)
}

// send sends a request through hc (c.http, or c.stream for an answer
// that may take minutes) and decodes a JSON answer into out.
func (c *Client) send(ctx context.Context, hc *http.Client, method, path, contentType string, in []byte, out any) error {
	var body io.Reader
	if in != nil {
		body = bytes.NewReader(in)
	}
	req, err := c.request(ctx, method, path, contentType, body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c.unreachable(method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return answerError(method, path, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// call sends a request with an optional JSON body and decodes the JSON
// answer as a T: the shape of most of the API's methods.
func call[T any](ctx context.Context, c *Client, method, path string, in any) (T, error) {
	var out T
	err := c.Do(ctx, method, path, in, &out)
	return out, err
}

// callList makes a request whose answer is a list: {"<key>": [...]}, or
// the bare array that agents and servers before one shape of lists gave.
func callList[T any](ctx context.Context, c *Client, method, path, key string, in any) ([]T, error) {
	raw, err := call[json.RawMessage](ctx, c, method, path, in)
	if err != nil {
		return nil, err
	}
	return api.DecodeList[T](raw, key)
}

func (c *Client) unreachable(method, path string, err error) error {
	if c.socket != "" {
		return fmt.Errorf("%s %s: %w (is the agent running with its local API at %s? set --agent-socket)", method, path, err, c.socket)
	}
	if hint := tlsca.Hint(err, "--ca-cert (or NODEMGR_CA_CERT)"); hint != "" {
		return fmt.Errorf("%s %s: %w (%s)", method, path, err, hint)
	}
	return fmt.Errorf("%s %s: %w (is the server running at %s? set --addr or NODEMGR_ADDR)", method, path, err, c.base)
}

// answerError reads an error answer.
func answerError(method, path string, resp *http.Response) error {
	var eb api.ErrorBody
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
		eb.Error = api.Error{Code: "internal", Message: fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(b))}
		if resp.StatusCode == http.StatusBadRequest && bytes.Contains(b, []byte("HTTPS server")) {
			// Go's answer to plain HTTP on a TLS port.
			eb.Error.Message = fmt.Sprintf("%s %s: the server speaks HTTPS: use an https:// address (--addr or NODEMGR_ADDR), and pass its CA with --ca-cert (or NODEMGR_CA_CERT) if it made its own", method, path)
		}
	}
	return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Field: eb.Error.Field}
}

// Health checks the server's liveness (no token needed).
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	return call[api.Health](ctx, c, http.MethodGet, "/healthz", nil)
}

// Whoami returns the caller.
func (c *Client) Whoami(ctx context.Context) (api.User, error) {
	return call[api.User](ctx, c, http.MethodGet, "/v1/whoami", nil)
}

// Nodes lists every node, optionally only those with a status, page
// after page.
func (c *Client) Nodes(ctx context.Context, status string) ([]api.Node, error) {
	return allPages[api.Node](ctx, func(ctx context.Context, p Page) (api.NodeList, error) {
		return c.NodesPage(ctx, status, p)
	})
}

// NodesPage lists one page of nodes, optionally only those with a status.
func (c *Client) NodesPage(ctx context.Context, status string, p Page) (api.NodeList, error) {
	return call[api.NodeList](ctx, c, http.MethodGet, withQuery("/v1/nodes", p.values(filter("status", status))), nil)
}

// Node returns one node by ID, name or unique ID prefix.
func (c *Client) Node(ctx context.Context, ref string) (api.Node, error) {
	return call[api.Node](ctx, c, http.MethodGet, "/v1/nodes/"+url.PathEscape(ref), nil)
}

// PatchNode changes a node's tags, labels or groups.
func (c *Client) PatchNode(ctx context.Context, ref string, p api.NodePatch) (api.Node, error) {
	return call[api.Node](ctx, c, http.MethodPatch, "/v1/nodes/"+url.PathEscape(ref), p)
}

// DeleteNode forgets a node that is not connected.
func (c *Client) DeleteNode(ctx context.Context, ref string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(ref), nil, nil)
}

// ShutdownNode tells a node's agent to exit (api.ShutdownGraceful or api.ShutdownForce).
func (c *Client) ShutdownNode(ctx context.Context, ref, mode string) (api.Node, error) {
	return call[api.Node](ctx, c, http.MethodPost, "/v1/nodes/"+url.PathEscape(ref)+"/shutdown", api.ShutdownRequest{Mode: mode})
}

// Users lists every user (admins only).
func (c *Client) Users(ctx context.Context) ([]api.User, error) {
	return allPages[api.User](ctx, c.UsersPage)
}

// UsersPage lists one page of users (admins only).
func (c *Client) UsersPage(ctx context.Context, p Page) (api.UserList, error) {
	return call[api.UserList](ctx, c, http.MethodGet, withQuery("/v1/users", p.values(nil)), nil)
}

// CreateUser creates a user.
func (c *Client) CreateUser(ctx context.Context, r api.CreateUserRequest) (api.User, error) {
	return call[api.User](ctx, c, http.MethodPost, "/v1/users", r)
}

// DeleteUser deletes a user and their tokens.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(name), nil, nil)
}

// SetRole sets a user's role in a group; role "" removes the membership.
func (c *Client) SetRole(ctx context.Context, user, group, role string) (api.User, error) {
	return call[api.User](ctx, c, http.MethodPut, "/v1/users/"+url.PathEscape(user)+"/groups/"+url.PathEscape(group),
		map[string]string{"role": role})
}

// Tokens lists every API token the caller may see.
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	return allPages[api.Token](ctx, c.TokensPage)
}

// TokensPage lists one page of API tokens.
func (c *Client) TokensPage(ctx context.Context, p Page) (api.TokenList, error) {
	return call[api.TokenList](ctx, c, http.MethodGet, withQuery("/v1/tokens", p.values(nil)), nil)
}

// CreateToken creates an API token; its Secret is set only in this answer.
func (c *Client) CreateToken(ctx context.Context, r api.CreateTokenRequest) (api.Token, error) {
	return call[api.Token](ctx, c, http.MethodPost, "/v1/tokens", r)
}

// RotateToken replaces an API token with a new one (same name, user and
// lifetime) and revokes the old; the new Secret is set only in this answer.
func (c *Client) RotateToken(ctx context.Context, id string) (api.Token, error) {
	return call[api.Token](ctx, c, http.MethodPost, "/v1/tokens/"+url.PathEscape(id)+"/rotate", nil)
}

// DeleteToken revokes an API token.
func (c *Client) DeleteToken(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil)
}

// ClearActionCache empties group's action cache (the caller's own when
// group is ""), or removes the entry of key, and says how many went.
func (c *Client) ClearActionCache(ctx context.Context, group, key string) (int, error) {
	path := "/v1/action-cache"
	if group != "" {
		path = "/v1/groups/" + url.PathEscape(group) + "/action-cache"
	}
	if key != "" {
		path += "?key=" + url.QueryEscape(key)
	}
	var out api.ActionCacheCleared
	err := c.Do(ctx, http.MethodDelete, path, nil, &out)
	return out.Deleted, err
}

// JoinTokens lists every join token the caller may see.
func (c *Client) JoinTokens(ctx context.Context) ([]api.Token, error) {
	return allPages[api.Token](ctx, c.JoinTokensPage)
}

// JoinTokensPage lists one page of join tokens.
func (c *Client) JoinTokensPage(ctx context.Context, p Page) (api.TokenList, error) {
	return call[api.TokenList](ctx, c, http.MethodGet, withQuery("/v1/join-tokens", p.values(nil)), nil)
}

// CreateJoinToken creates a join token for agents.
func (c *Client) CreateJoinToken(ctx context.Context, r api.CreateTokenRequest) (api.Token, error) {
	return call[api.Token](ctx, c, http.MethodPost, "/v1/join-tokens", r)
}

// DeleteJoinToken revokes a join token.
func (c *Client) DeleteJoinToken(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/join-tokens/"+url.PathEscape(id), nil, nil)
}

// CreateSuite creates a task suite.
func (c *Client) CreateSuite(ctx context.Context, spec api.SuiteSpec) (api.Suite, error) {
	return call[api.Suite](ctx, c, http.MethodPost, "/v1/suites", spec)
}

// Suites lists every suite the caller may read, optionally in one state.
func (c *Client) Suites(ctx context.Context, state string) ([]api.Suite, error) {
	return allPages[api.Suite](ctx, func(ctx context.Context, p Page) (api.SuiteList, error) {
		return c.SuitesPage(ctx, state, p)
	})
}

// SuitesPage lists one page of suites, optionally in one state.
func (c *Client) SuitesPage(ctx context.Context, state string, p Page) (api.SuiteList, error) {
	return call[api.SuiteList](ctx, c, http.MethodGet, withQuery("/v1/suites", p.values(filter("state", state))), nil)
}

// Suite returns a suite by ID or name.
func (c *Client) Suite(ctx context.Context, ref string) (api.Suite, error) {
	return call[api.Suite](ctx, c, http.MethodGet, "/v1/suites/"+url.PathEscape(ref), nil)
}

// SuiteChange returns the suite once it differs from the answer whose ETag
// is etag ("" : at once), with its new ETag; or, when it did not change
// within wait (at most a minute), the old ETag and changed false. One
// request per change, instead of polling.
func (c *Client) SuiteChange(ctx context.Context, ref, etag string, wait time.Duration) (su api.Suite, newETag string, changed bool, err error) {
	path := "/v1/suites/" + url.PathEscape(ref) + "?wait=" + url.QueryEscape(wait.String())
	req, err := c.request(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return su, etag, false, err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return su, etag, false, c.unreachable(http.MethodGet, path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return su, etag, false, nil
	case resp.StatusCode >= 300:
		return su, etag, false, answerError(http.MethodGet, path, resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&su); err != nil {
		return su, etag, false, fmt.Errorf("GET %s: decode answer: %w", path, err)
	}
	return su, resp.Header.Get("ETag"), true, nil
}

// CloseSuite stops a suite taking tasks; it completes when the last ends.
func (c *Client) CloseSuite(ctx context.Context, ref string) (api.Suite, error) {
	return call[api.Suite](ctx, c, http.MethodPost, "/v1/suites/"+url.PathEscape(ref)+"/close", nil)
}

// CancelSuite cancels a suite and its unfinished tasks.
func (c *Client) CancelSuite(ctx context.Context, ref string) (api.Suite, error) {
	return call[api.Suite](ctx, c, http.MethodPost, "/v1/suites/"+url.PathEscape(ref)+"/cancel", nil)
}

// AssignSuite assigns a suite to these nodes only (nodes left out stop
// taking its tasks); none restores automatic assignment.
func (c *Client) AssignSuite(ctx context.Context, ref string, nodes []string) (api.Suite, error) {
	return c.assignSuite(ctx, ref, nodes, false)
}

// AddSuiteNodes assigns a suite to these nodes as well as to those it is
// assigned to already.
func (c *Client) AddSuiteNodes(ctx context.Context, ref string, nodes []string) (api.Suite, error) {
	return c.assignSuite(ctx, ref, nodes, true)
}

func (c *Client) assignSuite(ctx context.Context, ref string, nodes []string, add bool) (api.Suite, error) {
	if nodes == nil {
		nodes = []string{}
	}
	body := struct {
		Nodes []string `json:"nodes"`
		Add   bool     `json:"add,omitempty"`
	}{nodes, add}
	return call[api.Suite](ctx, c, http.MethodPost, "/v1/suites/"+url.PathEscape(ref)+"/assign", body)
}

// SubmitTasks adds tasks to a suite, all or none, and returns their IDs.
//
// A server busy receiving other batches answers 503 before it reads
// anything, so such a batch is sent again (up to 6 times, 2 s, 4 s ... apart).
func (c *Client) SubmitTasks(ctx context.Context, suite string, tasks []api.TaskSpec) ([]string, error) {
	body, err := json.Marshal(api.SubmitTasks{Tasks: tasks})
	if err != nil {
		return nil, err
	}
	path := "/v1/suites/" + url.PathEscape(suite) + "/tasks"
	for attempt := 1; ; attempt++ {
		var r api.SubmitResult
		err := c.DoRaw(ctx, http.MethodPost, path, "application/json", body, &r)
		var ce *Error
		if err == nil || attempt == 6 || !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable {
			return r.IDs, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 2 * time.Second):
		}
	}
}

// Tasks lists every task of a suite in the order they were submitted,
// optionally only those in one state, page after page.
func (c *Client) Tasks(ctx context.Context, suite, state string) ([]api.Task, error) {
	return allPages[api.Task](ctx, func(ctx context.Context, p Page) (api.TaskList, error) {
		return c.TasksPage(ctx, suite, state, p)
	})
}

// TasksPage lists one page of a suite's tasks, optionally only those in
// one state.
func (c *Client) TasksPage(ctx context.Context, suite, state string, p Page) (api.TaskList, error) {
	return call[api.TaskList](ctx, c, http.MethodGet, withQuery("/v1/suites/"+url.PathEscape(suite)+"/tasks", p.values(filter("state", state))), nil)
}

// Task returns one task with its result and failures.
func (c *Client) Task(ctx context.Context, id string) (api.Task, error) {
	return call[api.Task](ctx, c, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil)
}

// CancelTask cancels a Ready or Running task.
func (c *Client) CancelTask(ctx context.Context, id string) (api.Task, error) {
	return call[api.Task](ctx, c, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil)
}

// PutDocument stores a template ("templates") or mapping set ("mappings")
// from its YAML.
func (c *Client) PutDocument(ctx context.Context, plural, name string, yaml []byte) (api.Document, error) {
	var d api.Document
	return d, c.DoRaw(ctx, http.MethodPut, "/v1/"+plural+"/"+url.PathEscape(name), "application/yaml", yaml, &d)
}

// Document reads a stored template or mapping set.
func (c *Client) Document(ctx context.Context, plural, name string) (api.Document, error) {
	return call[api.Document](ctx, c, http.MethodGet, "/v1/"+plural+"/"+url.PathEscape(name), nil)
}

// Documents lists every template ("templates") or mapping set ("mappings").
func (c *Client) Documents(ctx context.Context, plural string) ([]api.Document, error) {
	return allPages[api.Document](ctx, func(ctx context.Context, p Page) (api.DocumentList, error) {
		return c.DocumentsPage(ctx, plural, p)
	})
}

// DocumentsPage lists one page of templates or mapping sets.
func (c *Client) DocumentsPage(ctx context.Context, plural string, p Page) (api.DocumentList, error) {
	return call[api.DocumentList](ctx, c, http.MethodGet, withQuery("/v1/"+plural, p.values(nil)), nil)
}

// DeleteDocument removes a template or mapping set.
func (c *Client) DeleteDocument(ctx context.Context, plural, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/"+plural+"/"+url.PathEscape(name), nil, nil)
}

// Render returns the Extra map a provider gets for a template.
func (c *Client) Render(ctx context.Context, name, provider string) (api.Rendered, error) {
	return call[api.Rendered](ctx, c, http.MethodGet, "/v1/templates/"+url.PathEscape(name)+"/render?provider="+url.QueryEscape(provider), nil)
}

// Provision asks for machines; they come back pending and the server
// provisions them in the background.
func (c *Client) Provision(ctx context.Context, r api.ProvisionRequest) ([]api.Deployment, error) {
	l, err := call[api.DeploymentList](ctx, c, http.MethodPost, "/v1/deployments", r)
	return l.Deployments, err
}

// Deployments lists every deployment, optionally in some states
// (comma-separated).
func (c *Client) Deployments(ctx context.Context, states string) ([]api.Deployment, error) {
	return allPages[api.Deployment](ctx, func(ctx context.Context, p Page) (api.DeploymentList, error) {
		return c.DeploymentsPage(ctx, states, p)
	})
}

// DeploymentsPage lists one page of deployments, optionally in some
// states (comma-separated).
func (c *Client) DeploymentsPage(ctx context.Context, states string, p Page) (api.DeploymentList, error) {
	return call[api.DeploymentList](ctx, c, http.MethodGet, withQuery("/v1/deployments", p.values(filter("state", states))), nil)
}

// Deployment returns one deployment by ID or live name.
func (c *Client) Deployment(ctx context.Context, ref string) (api.Deployment, error) {
	return call[api.Deployment](ctx, c, http.MethodGet, "/v1/deployments/"+url.PathEscape(ref), nil)
}

// DestroyDeployment removes a machine.
func (c *Client) DestroyDeployment(ctx context.Context, ref string) (api.Deployment, error) {
	return call[api.Deployment](ctx, c, http.MethodDelete, "/v1/deployments/"+url.PathEscape(ref), nil)
}

// Lifecycle performs start, stop, hibernate, reboot or terminate.
func (c *Client) Lifecycle(ctx context.Context, ref, verb string) (api.Deployment, error) {
	return call[api.Deployment](ctx, c, http.MethodPost, "/v1/deployments/"+url.PathEscape(ref)+"/lifecycle/"+url.PathEscape(verb), nil)
}

// Exec runs a command on a deployment (by ID or live name), writing its
// output to stdout and stderr as the server streams it, and returns its
// exit code. An error means the command could not be run or was cut off
// (by req.Timeout, ctx or a lost connection); the exit code is then -1.
func (c *Client) Exec(ctx context.Context, ref string, req api.ExecRequest, stdout, stderr io.Writer) (int, error) {
	path := "/v1/deployments/" + url.PathEscape(ref) + "/exec"
	b, err := json.Marshal(req)
	if err != nil {
		return -1, err
	}
	hreq, err := c.request(ctx, http.MethodPost, path, "application/json", bytes.NewReader(b))
	if err != nil {
		return -1, err
	}
	resp, err := c.streamDo(hreq)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return -1, fmt.Errorf("exec on %s: the stream ended before the command's exit: %w", ref, err)
		}
		switch {
		case ev.Exit != nil:
			return *ev.Exit, nil
		case ev.Error != "":
			return -1, &Error{Status: resp.StatusCode, Code: ev.Code, Message: ev.Error}
		}
		w := stdout
		if ev.Stream == "stderr" {
			w = stderr
		}
		if w == nil || len(ev.Data) == 0 {
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			return -1, fmt.Errorf("exec on %s: write %s: %w", ref, ev.Stream, err)
		}
	}
}

// CopyTo copies the local file or tree src to dst, an absolute path on
// the deployment: dst names the copy itself, or, ending in "/", the
// directory to copy into. Modes, modification times and symbolic links
// are kept. The deployment's default executor copies (see CopyToVia).
func (c *Client) CopyTo(ctx context.Context, ref, src, dst string) error {
	return c.CopyToVia(ctx, ref, "", src, dst)
}

// CopyToVia is CopyTo with the executor named by via (local, docker, ssh,
// sftp, rsync), which the deployment must offer; "" for its first copy:
// capability, else its first executor.
func (c *Client) CopyToVia(ctx context.Context, ref, via, src, dst string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	name := filepath.Base(abs)
	if name == string(filepath.Separator) {
		return fmt.Errorf("copy %s: cannot copy the root directory; name a directory under it", src)
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := archive.Write(ctx, pw, abs, name)
		pw.CloseWithError(err)
		written <- err
	}()
	path := "/v1/deployments/" + url.PathEscape(ref) + "/files?" + copyQuery(dst, via)
	req, err := c.request(ctx, http.MethodPut, path, "application/x-tar", pr)
	var resp *http.Response
	if err == nil {
		// An upload the server refuses (unknown node, not an admin) is
		// not sent at all.
		req.Header.Set("Expect", "100-continue")
		resp, err = c.streamDo(req)
	}
	pr.CloseWithError(errCopyEnded)
	werr := <-written
	switch {
	case werr != nil && !errors.Is(werr, errCopyEnded) && !errors.Is(werr, io.ErrClosedPipe):
		// Reading src failed: that, not the server's view of a cut
		// upload, is the cause.
		return fmt.Errorf("copy %s: %w", src, werr)
	case err != nil:
		return err
	}
	resp.Body.Close()
	return nil
}

var errCopyEnded = errors.New("copy ended")

// CopyFrom copies the file or tree at src, an absolute path on the
// deployment, to the local path dst: dst names the copy itself, or, ending
// in a separator (or being "." or ".."), the directory to copy into. Modes,
// modification times and symbolic links are kept; nothing is written
// outside the copy, whatever the archive says. The deployment's default
// executor copies (see CopyFromVia).
func (c *Client) CopyFrom(ctx context.Context, ref, src, dst string) error {
	return c.CopyFromVia(ctx, ref, "", src, dst)
}

// CopyFromVia is CopyFrom with the executor named by via, as CopyToVia.
func (c *Client) CopyFromVia(ctx context.Context, ref, via, src, dst string) error {
	req, err := c.request(ctx, http.MethodGet, "/v1/deployments/"+url.PathEscape(ref)+"/files?"+copyQuery(src, via), "", nil)
	if err != nil {
		return err
	}
	resp, err := c.streamDo(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := archive.Extract(ctx, resp.Body, dst); err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", ref, src, dst, err)
	}
	return nil
}

// copyQuery is the query of a file copy: the path on the machine and
// the executor, if one is named.
func copyQuery(path, via string) string {
	q := url.Values{"path": {path}}
	if via != "" {
		q.Set("via", via)
	}
	return q.Encode()
}

// request makes a request to the server with the client's token. A token
// bound for plain HTTP beyond loopback stops here, before any dial.
func (c *Client) request(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Request, error) {
	if c.token != "" && c.socket == "" {
		if err := cleartext.Check(c.base, c.insecureHTTP, insecureSetting); err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req, nil
}

// streamDo sends a request whose answer may last as long as a command or a
// copy does, and returns the answer when it is a success.
func (c *Client) streamDo(req *http.Request) (*http.Response, error) {
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, c.unreachable(req.Method, req.URL.RequestURI(), err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, answerError(req.Method, req.URL.RequestURI(), resp)
	}
	return resp, nil
}
