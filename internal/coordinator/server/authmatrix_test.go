package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// need is the least a caller must be to use a route on objects of group a.
type need int

const (
	needAnyUser    need = iota // any API token (lists are filtered by role)
	needRead                   // Read in group a
	needWrite                  // Write in group a
	needGroupAdmin             // Admin in group a
	needAdmin                  // an admin user
	needJoin                   // a join token or the node's own credential (registration)
	needNode                   // the node's own credential (the agent WebSocket)
	needBlobWrite              // Write in some group, or a node that holds a task (checking for and uploading task files)
	needBlobRead               // an admin user, or a node that holds a task naming the file (reading a task file by digest)
	needNothing                // /healthz
	// needBootstrap: an unspent join token bound to a pool machine's
	// deployment (fetching its agent); the fixture's join token is bound
	// to none, so every caller is refused.
	needBootstrap
)

// routeNeeds classifies every route. A route missing here fails the test:
// a new route must say who may call it.
var routeNeeds = map[string]need{
	"GET /healthz":         needNothing,
	"GET /metrics":         needAdmin,
	"GET /v1/openapi.json": needAnyUser,
	"GET /v1/whoami":       needAnyUser,
	"GET /v1/summary":      needAdmin,

	"GET /v1/nodes":                  needAnyUser,
	"GET /v1/nodes/{node}":           needRead,
	"PATCH /v1/nodes/{node}":         needWrite,
	"DELETE /v1/nodes/{node}":        needGroupAdmin,
	"POST /v1/nodes/{node}/shutdown": needGroupAdmin,
	"GET /v1/nodes/{node}/usage":     needRead,
	"GET /v1/nodes/{node}/overlay":   needRead,
	"GET /v1/network":                needAnyUser,
	"POST /v1/agent/register":        needJoin,
	"GET /v1/agent/connect":          needNode,
	"GET /v1/agent/binary":           needBootstrap,

	"GET /v1/suites":                         needAnyUser,
	"POST /v1/suites":                        needWrite,
	"GET /v1/suites/{suite}":                 needRead,
	"POST /v1/suites/{suite}/close":          needWrite,
	"POST /v1/suites/{suite}/cancel":         needWrite,
	"POST /v1/suites/{suite}/assign":         needWrite,
	"GET /v1/suites/{suite}/tasks":           needRead,
	"POST /v1/suites/{suite}/tasks":          needWrite,
	"GET /v1/tasks/{task}":                   needRead,
	"POST /v1/tasks/{task}/cancel":           needWrite,
	"DELETE /v1/action-cache":                needAnyUser, // the caller's own scope
	"DELETE /v1/groups/{group}/action-cache": needWrite,
	"GET /v1/tasks/{task}/outputs/{path...}": needRead,
	"GET /v1/tasks/{task}/logs":              needRead,
	"HEAD /v1/blobs/{digest}":                needBlobWrite,
	"PUT /v1/blobs/{digest}":                 needBlobWrite,
	"GET /v1/blobs/{digest}":                 needBlobRead,
	// Ensembles are their owner's; deploying needs Write on the nodes the
	// placement may use (none here, so a user without it gets a 409).
	"GET /v1/ensembles":                      needAnyUser,
	"POST /v1/ensembles":                     needAnyUser,
	"GET /v1/ensembles/{ensemble}":           needAnyUser,
	"POST /v1/ensembles/{ensemble}/shutdown": needAnyUser,
	"GET /v1/templates":                      needAdmin,
	"GET /v1/templates/{name}":               needAdmin,
	"PUT /v1/templates/{name}":               needAdmin,
	"DELETE /v1/templates/{name}":            needAdmin,
	"GET /v1/templates/{name}/render":        needAdmin,
	"GET /v1/mappings":                       needAdmin,
	"GET /v1/mappings/{name}":                needAdmin,
	"PUT /v1/mappings/{name}":                needAdmin,
	"DELETE /v1/mappings/{name}":             needAdmin,
	"GET /v1/deployments":                    needAdmin,
	"POST /v1/deployments":                   needAdmin,
	"GET /v1/deployments/{deployment}":       needAdmin,

	"DELETE /v1/deployments/{deployment}":                  needAdmin,
	"POST /v1/deployments/{deployment}/lifecycle/{verb}":   needAdmin,
	"POST /v1/deployments/{deployment}/exec":               needAdmin,
	"PUT /v1/deployments/{deployment}/files":               needAdmin,
	"GET /v1/deployments/{deployment}/files":               needAdmin,
	"GET /v1/pools":                                        needAdmin,
	"GET /v1/pools/{pool}":                                 needAdmin,
	"PUT /v1/pools/{pool}":                                 needAdmin,
	"PATCH /v1/pools/{pool}":                               needAdmin,
	"DELETE /v1/pools/{pool}":                              needAdmin,
	"GET /v1/pools/{pool}/events":                          needAdmin,
	"POST /v1/schedule/explain":                            needAdmin,
	"GET /v1/users":                                        needAdmin,
	"POST /v1/users":                                       needAdmin,
	"DELETE /v1/users/{user}":                              needAdmin,
	"PUT /v1/users/{user}/groups/{group}":                  needGroupAdmin,
	"GET /v1/tokens":                                       needAnyUser,
	"POST /v1/tokens":                                      needAnyUser,
	"DELETE /v1/tokens/{token}":                            needAdmin, // another user's token
	"POST /v1/tokens/{token}/rotate":                       needAdmin, // another user's token
	"GET /v1/join-tokens":                                  needAnyUser,
	"POST /v1/join-tokens":                                 needGroupAdmin,
	"DELETE /v1/join-tokens/{token}":                       needAdmin, // another user's token
	"GET /v1/nodes/{node}/artifacts":                       needRead,
	"POST /v1/nodes/{node}/artifacts":                      needWrite,
	"GET /v1/nodes/{node}/artifacts/{id}":                  needRead,
	"DELETE /v1/nodes/{node}/artifacts/{id}":               needWrite,
	"GET /v1/nodes/{node}/services":                        needRead,
	"POST /v1/nodes/{node}/services":                       needWrite,
	"GET /v1/nodes/{node}/services/{coordinate}":           needRead,
	"DELETE /v1/nodes/{node}/services/{coordinate}":        needWrite,
	"POST /v1/nodes/{node}/services/{coordinate}/{action}": needWrite,
	"GET /v1/nodes/{node}/services/{coordinate}/logs":      needRead,
	"GET /v1/nodes/{node}/resources":                       needRead,
	"POST /v1/nodes/{node}/onboard":                        needWrite,
	"POST /v1/nodes/{node}/offboard":                       needWrite,
	"POST /v1/nodes/{node}/commitments":                    needWrite,
	"DELETE /v1/nodes/{node}/commitments/{id}":             needWrite,
	"GET /v1/nodes/{node}/allocations":                     needRead,
	"GET /v1/nodes/{node}/allocations/{id}":                needRead,
	"POST /v1/nodes/{node}/allocations/{id}/{action}":      needWrite,
	"GET /v1/nodes/{node}/allocations/{id}/logs":           needRead,
	"GET /v1/containers":                                   needAnyUser,
	"POST /v1/containers":                                  needWrite,
	"GET /v1/containers/{id}":                              needRead,
	"DELETE /v1/containers/{id}":                           needWrite,
	"GET /v1/containers/{id}/logs":                         needRead,
}

// routeBodies are valid bodies, so that what a forbidden caller meets is
// the permission check and not a validation error.
var routeBodies = map[string]any{
	"PATCH /v1/nodes/{node}":              api.NodePatch{AddTags: []string{"x"}},
	"POST /v1/nodes/{node}/shutdown":      api.ShutdownRequest{Mode: api.ShutdownForce},
	"POST /v1/suites":                     api.SuiteSpec{Name: "new", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
	"POST /v1/suites/{suite}/assign":      assignRequest{Nodes: []string{"n1"}},
	"POST /v1/suites/{suite}/tasks":       api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}},
	"POST /v1/users":                      api.CreateUserRequest{Name: "newcomer"},
	"PUT /v1/users/{user}/groups/{group}": membershipRequest{Role: api.RoleRead},
	"POST /v1/tokens":                     api.CreateTokenRequest{},
	"POST /v1/join-tokens":                api.CreateTokenRequest{Groups: []string{"a"}},
	"POST /v1/agent/register":             api.RegisterRequest{MachineID: "machine-n1", DataDir: "/var/lib/nodemgr", Name: "n1"},
	"PUT /v1/pools/{pool}":                api.PoolSpec{Template: "t1", Provider: "local", Max: 1},
	"PATCH /v1/pools/{pool}":              api.PoolPatch{Priority: new(int)},
	"POST /v1/schedule/explain":           api.ScheduleRequest{CPUs: 1},
	"POST /v1/containers": api.ContainerCommand{Command: api.ContainerDeploy, Worker: []string{"n1"},
		Job: api.ContainerJob{Name: "web", Image: "busybox"}},
}

// credential is one kind of caller in the matrix.
type credential struct {
	name   string
	secret string
	// allowed says whether the caller may use a route that needs n.
	allowed func(n need) bool
}

// matrixFixture is a server with group a's node n1, suite s1 and its task,
// and one caller of each kind. n1 holds a task of group a with the input
// file blob; group b's node n2 holds a task of its own with another input.
type matrixFixture struct {
	ts                    *testServer
	suite, task, tokenID  string
	joinTokenID, nodeName string
	blob                  string
	creds                 []credential
}

// holdTaskWithInput makes a suite of group in, with a task whose input is
// content (uploaded), and has node claim it; it returns the digest.
func holdTaskWithInput(t *testing.T, ts *testServer, group, node, content string) string {
	t.Helper()
	d := digestOf([]byte(content))
	ts.mustRaw(t, http.StatusCreated, ts.admin, "PUT", "/v1/blobs/"+d, []byte(content))
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "files-" + group, Group: group}, &su)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{
		{Argv: []string{"cat", "in"}, Inputs: []api.TaskFile{{Path: "in", Digest: d, Size: int64(len(content))}}},
	}}, nil)
	if got, err := ts.store.ClaimTasks(t.Context(), su.ID, node, 1); err != nil || len(got) != 1 {
		t.Fatalf("claim in %s for %s = %d tasks, %v; want 1", su.Name, node, len(got), err)
	}
	return d
}

func newMatrixFixture(t *testing.T) *matrixFixture {
	ts := newTestServer(t)
	f := &matrixFixture{ts: ts, nodeName: "n1"}
	n1, nodeCred := ts.nodeNamed(t, "n1", "a")
	n2, foreignCred := ts.nodeNamed(t, "n2", "b")
	f.blob = holdTaskWithInput(t, ts, "a", n1, "group a's input")
	holdTaskWithInput(t, ts, "b", n2, "group b's input")

	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s1", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	var ids api.SubmitResult
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", routeBodies["POST /v1/suites/{suite}/tasks"], &ids)
	f.suite, f.task = su.ID, ids.IDs[0]
	var tk, jt api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Name: "spare"}, &tk)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Groups: []string{"a"}}, &jt)
	f.tokenID, f.joinTokenID = tk.ID, jt.ID
	ts.user(t, "victim", false, nil)

	revoked := ts.user(t, "revoked", false, map[string]string{"a": api.RoleAdmin})
	var mine api.TokenList
	ts.mustCall(t, http.StatusOK, revoked, "GET", "/v1/tokens", nil, &mine)
	ts.mustCall(t, http.StatusNoContent, ts.admin, "DELETE", "/v1/tokens/"+mine.Tokens[0].ID, nil, nil)

	expired, hash := auth.NewSecret(api.TokenAPI)
	past := time.Now().Add(-time.Hour)
	if err := ts.store.CreateToken(t.Context(), store.Token{ID: auth.NewID("t-"), Kind: api.TokenAPI, Hash: hash,
		User: "admin", CreatedAt: past.Add(-time.Hour), ExpiresAt: past}); err != nil {
		t.Fatal(err)
	}

	never := func(need) bool { return false }
	// writesSomewhere: Write in some group, here or in another.
	role := func(least need, writesSomewhere bool) func(need) bool {
		return func(n need) bool {
			return n == needNothing || n <= least || n == needBlobWrite && writesSomewhere || n == needBlobRead && least == needAdmin
		}
	}
	f.creds = []credential{
		{"none", "", never},
		{"garbage", "nmu_notatokenatall", never},
		{"expired", expired, never},
		{"revoked", revoked, never},
		{"node credential", nodeCred, func(n need) bool {
			return n == needNothing || n == needJoin || n == needNode || n == needBlobWrite || n == needBlobRead
		}},
		// A node of group b holding a task of its own: it may upload, but
		// not read group a's file, nor re-join as n1.
		{"foreign node", foreignCred, func(n need) bool {
			return n == needNothing || n == needNode || n == needBlobWrite
		}},
		{"join token", jt.Secret, func(n need) bool { return n == needNothing || n == needJoin }},
		{"outsider", ts.user(t, "outsider", false, map[string]string{"b": api.RoleAdmin}), role(needAnyUser, true)},
		{"reader", ts.user(t, "reader", false, map[string]string{"a": api.RoleRead}), role(needRead, false)},
		{"writer", ts.user(t, "writer", false, map[string]string{"a": api.RoleWrite}), role(needWrite, true)},
		{"group admin", ts.user(t, "gadmin", false, map[string]string{"a": api.RoleAdmin}), role(needGroupAdmin, true)},
		{"admin", ts.admin, role(needAdmin, true)},
	}
	for i := range f.creds {
		allowed := f.creds[i].allowed
		f.creds[i].allowed = func(n need) bool { return n == needNothing || allowed(n) }
	}
	return f
}

// path fills a route's pattern with the fixture's objects.
func (f *matrixFixture) path(pattern string) string {
	r := strings.NewReplacer(
		"{node}", f.nodeName, "{suite}", f.suite, "{task}", f.task, "{user}", "victim", "{group}", "a",
		"{name}", "t1", "{deployment}", "d-none", "{verb}", "start", "{id}", "x1",
		"{coordinate}", "i.s.u.c", "{action}", "stop", "{pool}", "p1", "{digest}", f.blob,
	)
	token := f.tokenID
	if strings.HasPrefix(pattern, "/v1/join-tokens/") {
		token = f.joinTokenID
	}
	return strings.ReplaceAll(r.Replace(pattern), "{token}", token)
}

// TestAuthMatrix calls every route in the route table with every kind of
// credential, each route on a fresh server, weakest callers first. A
// caller the role model forbids gets 401 (not a user's credential) or
// 403/404 (a user without the role), never 2xx; an allowed caller never
// gets 401 or 403.
func TestAuthMatrix(t *testing.T) {
	for _, rt := range (&Server{}).routeTable() {
		key := rt.Method + " " + rt.Path
		n, ok := routeNeeds[key]
		if !ok {
			t.Errorf("route %s is not in routeNeeds: say who may call it", key)
			continue
		}
		t.Run(key, func(t *testing.T) {
			f := newMatrixFixture(t)
			for _, c := range f.creds {
				code, body := f.ts.call(t, c.secret, rt.Method, f.path(rt.Path), routeBodies[key], nil)
				// Who presents no valid credential of a kind the route takes
				// is unauthenticated; a user or node short of a role, or
				// another node's credential, is not permitted.
				unauthenticated := !takes(n, c.name)
				switch allowed := c.allowed(n); {
				case allowed && (code == http.StatusUnauthorized || code == http.StatusForbidden):
					t.Errorf("%s: %s = %d %s, want it allowed", c.name, key, code, firstLine(body))
				case !allowed && code/100 == 2:
					t.Errorf("%s: %s = %d, want it refused", c.name, key, code)
				case !allowed && !unauthenticated && code != http.StatusForbidden && code != http.StatusNotFound:
					t.Errorf("%s: %s = %d %s, want 403 or 404", c.name, key, code, firstLine(body))
				case !allowed && unauthenticated && code != http.StatusUnauthorized:
					t.Errorf("%s: %s = %d %s, want 401", c.name, key, code, firstLine(body))
				}
			}
		})
	}
}

func isUserCred(name string) bool {
	switch name {
	case "outsider", "reader", "writer", "group admin", "admin":
		return true
	}
	return false
}

func isNodeCred(name string) bool { return name == "node credential" || name == "foreign node" }

// takes reports whether a route that needs n takes the kind of credential
// the caller named name presents (valid or not).
func takes(n need, name string) bool {
	switch n {
	case needJoin:
		return name == "join token" || isNodeCred(name)
	case needNode:
		return isNodeCred(name)
	case needBootstrap:
		return name == "join token"
	case needBlobWrite, needBlobRead:
		return isUserCred(name) || isNodeCred(name)
	}
	return isUserCred(name)
}

func firstLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// TestAuthMatrixAgentMethods is the matrix's node side: a node credential
// of group b, over its own agent connection, tries every agent method that
// names group a's suite or tasks. It claims nothing, however fast it asks
// (the server looks at other suites at most once a second; the store
// authorizes every claim), and its reports, returns and problems change
// nothing. Then a's own node claims the task and reports a result whose
// output path leaves the sandbox: the attempt fails instead of storing it.
func TestAuthMatrixAgentMethods(t *testing.T) {
	s, _, admin := newServer(t, "", Config{})
	url := serve(t, s)
	ts := &testServer{Server: s, http: httptest.NewServer(s.Handler()), admin: admin}
	t.Cleanup(ts.http.Close)
	_, credA := ts.nodeNamed(t, "a1", "a")
	_, credB := ts.nodeNamed(t, "b1", "b")

	var su api.Suite
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites",
		api.SuiteSpec{Name: "secret", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	var ids api.SubmitResult
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites/"+su.ID+"/tasks",
		api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"deploy"}, Env: map[string]string{"DEPLOY_KEY": "hunter2"}}}}, &ids)
	task := ids.IDs[0]
	ready := func(when string) {
		t.Helper()
		var got api.Suite
		ts.mustCall(t, http.StatusOK, admin, "GET", "/v1/suites/"+su.ID, nil, &got)
		if got.Counts.Ready != 1 || got.Counts.Running != 0 || len(got.Problems) != 0 {
			t.Errorf("suite %s %s: ready %d, running %d, problems %v; want 1, 0, none",
				su.Name, when, got.Counts.Ready, got.Counts.Running, got.Problems)
		}
	}

	foreign := connectTestAgent(t, url, credB, 1)
	for i, max := range []int{1, 32, 32, 0, 32} { // inside one second
		var resp api.TasksFetched
		foreign.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: max}, &resp)
		if len(resp.Tasks) != 0 || resp.Yield == "" || resp.Remaining != -1 || resp.SuiteState != "" {
			t.Errorf("foreign fetch %d (max %d) = %d tasks, yield %q, remaining %d, state %q; want none, a yield, -1, \"\"",
				i, max, len(resp.Tasks), resp.Yield, resp.Remaining, resp.SuiteState)
		}
	}
	ready("after foreign fetches")
	foreign.call(api.MethodSuiteLeave, api.SuiteLeave{SuiteID: su.ID, Reason: "prepare-failed",
		Problem: &api.SuiteProblem{Stage: api.StagePrepare, ExitCode: 1, Reason: "forged"}}, nil)
	ready("after a foreign problem")

	own := connectTestAgent(t, url, credA, 1)
	var got api.TasksFetched
	own.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: 1}, &got)
	if len(got.Tasks) != 1 || got.Tasks[0].ID != task {
		t.Fatalf("own fetch = %+v, want task %s", got.Tasks, task)
	}
	forged := api.TasksReport{Reports: []api.TaskReport{{TaskID: task, Attempt: 1, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Stdout: "forged"}}}}
	var applied struct{ Applied int }
	foreign.call(api.MethodTasksReport, forged, &applied)
	var returned struct{ Returned int }
	foreign.call(api.MethodTasksReturn, api.TasksReturn{TaskIDs: []string{task}}, &returned)
	if applied.Applied != 0 || returned.Returned != 0 {
		t.Errorf("foreign report and return of a's task applied %d, returned %d; want 0, 0", applied.Applied, returned.Returned)
	}

	escape := api.TasksReport{Reports: []api.TaskReport{{TaskID: task, Attempt: 1, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Outputs: []api.TaskFile{{Path: "../../etc/passwd", Digest: "sha256:" + strings.Repeat("0", 64)}}}}}}
	own.call(api.MethodTasksReport, escape, &applied)
	var tk api.Task
	ts.mustCall(t, http.StatusOK, admin, "GET", "/v1/tasks/"+task, nil, &tk)
	if tk.State == api.TaskFinished || (tk.Result != nil && len(tk.Result.Outputs) > 0) ||
		len(tk.Failures) != 1 || !strings.Contains(tk.Failures[0].Reason, "invalid result") {
		t.Errorf("task after a report with an output outside its sandbox = %s, result %+v, failures %+v; want it failed with the reason, no outputs",
			tk.State, tk.Result, tk.Failures)
	}
}
