package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestRevokedRoleStopsSuiteWork: owning a suite does not outlive the role
// it was created with. Once the owner's Write role in the group is gone,
// they can no longer submit tasks (run commands on the group's nodes) or
// assign nodes, but may still read and cancel what they own.
func TestRevokedRoleStopsSuiteWork(t *testing.T) {
	ts := newTestServer(t)
	bob := ts.user(t, "bob", false, map[string]string{"a": api.RoleWrite})
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, bob, "POST", "/v1/suites",
		api.SuiteSpec{Name: "build", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	tasks := api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}}
	ts.mustCall(t, http.StatusCreated, bob, "POST", "/v1/suites/"+su.ID+"/tasks", tasks, nil)

	ts.mustCall(t, http.StatusOK, ts.admin, "PUT", "/v1/users/bob/groups/a", membershipRequest{Role: ""}, nil)

	if code, body := ts.call(t, bob, "POST", "/v1/suites/"+su.ID+"/tasks", tasks, nil); code != http.StatusForbidden {
		t.Errorf("owner without a role submitting tasks = %d %s, want 403", code, body)
	}
	if code, body := ts.call(t, bob, "POST", "/v1/suites/"+su.ID+"/assign", assignRequest{Nodes: []string{}}, nil); code != http.StatusForbidden {
		t.Errorf("owner without a role assigning nodes = %d %s, want 403", code, body)
	}
	ts.mustCall(t, http.StatusOK, bob, "GET", "/v1/suites/"+su.ID, nil, nil)
	ts.mustCall(t, http.StatusOK, bob, "POST", "/v1/suites/"+su.ID+"/cancel", nil, nil)

	// A reader of the group is no better off than before.
	ts.mustCall(t, http.StatusOK, ts.admin, "PUT", "/v1/users/bob/groups/a", membershipRequest{Role: api.RoleRead}, nil)
	var other api.Suite
	admin := ts.admin
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites", api.SuiteSpec{Name: "other", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &other)
	if code, body := ts.call(t, bob, "POST", "/v1/suites/"+other.ID+"/tasks", tasks, nil); code != http.StatusForbidden {
		t.Errorf("reader submitting tasks = %d %s, want 403", code, body)
	}
}

// TestSuiteNameClashNamesNothingHidden: suite names are unique among live
// suites of every group, so a clash tells a user that the name is taken;
// it names the suite that holds it only to a caller who may read that suite.
func TestSuiteNameClashNamesNothingHidden(t *testing.T) {
	ts := newTestServer(t)
	alice := ts.user(t, "alice", false, map[string]string{"a": api.RoleWrite})
	bob := ts.user(t, "bob", false, map[string]string{"b": api.RoleWrite})
	carol := ts.user(t, "carol", false, map[string]string{"a": api.RoleRead, "b": api.RoleWrite})
	var sa api.Suite
	ts.mustCall(t, http.StatusCreated, alice, "POST", "/v1/suites",
		api.SuiteSpec{Name: "sa", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &sa)
	for _, tc := range []struct {
		name, token string
		seesID      bool
	}{
		{"another group's writer", bob, false},
		{"a reader of the group", carol, true},
		{"the owner", alice, true},
		{"an admin", ts.admin, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.call(t, tc.token, "POST", "/v1/suites",
				api.SuiteSpec{Name: "sa", Group: "b", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, nil)
			if tc.token == alice { // alice may not write in b: she asks in her own group
				code, body = ts.call(t, tc.token, "POST", "/v1/suites",
					api.SuiteSpec{Name: "sa", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, nil)
			}
			if code != http.StatusConflict {
				t.Fatalf("create a second suite sa = %d %s, want 409", code, body)
			}
			if got := strings.Contains(body, sa.ID); got != tc.seesID {
				t.Errorf("409 body names %s: %v, want %v: %s", sa.ID, got, tc.seesID, body)
			}
		})
	}
}

// TestRunAsNeedsAGroupAdmin: a suite may run its code with the agent's
// own rights (run_as root or agent, which can read the node's
// credential) only when an admin of its group creates it; a writer may
// name an unprivileged user or none, and a malformed name is a field
// error. (Issue 26: a group-B writer's task read agent.json.)
func TestRunAsNeedsAGroupAdmin(t *testing.T) {
	ts := newTestServer(t)
	writer := ts.user(t, "wanda", false, map[string]string{"a": api.RoleWrite})
	groupAdmin := ts.user(t, "gina", false, map[string]string{"a": api.RoleAdmin})
	otherAdmin := ts.user(t, "oscar", false, map[string]string{"a": api.RoleWrite, "b": api.RoleAdmin})
	tests := []struct {
		name   string
		caller string
		runAs  string
		want   int
		says   string
	}{
		{"writer, default", writer, "", http.StatusCreated, ""},
		{"writer, a named user", writer, "builder", http.StatusCreated, ""},
		{"writer, root", writer, "root", http.StatusForbidden, "run_as"},
		{"writer, uid 0", writer, "0", http.StatusForbidden, "run_as"},
		{"writer, the agent's user", writer, "agent", http.StatusForbidden, "run_as"},
		{"admin of another group, root", otherAdmin, "root", http.StatusForbidden, "only an admin of group a"},
		{"group admin, root", groupAdmin, "root", http.StatusCreated, ""},
		{"group admin, agent", groupAdmin, "agent", http.StatusCreated, ""},
		{"admin, root", ts.admin, "root", http.StatusCreated, ""},
		{"writer, a malformed name", writer, "root; rm -rf /", http.StatusBadRequest, "run_as"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := api.SuiteSpec{Name: fmt.Sprintf("runas-%d", i), Group: "a", RunAs: tc.runAs, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}
			var su api.Suite
			code, body := ts.call(t, tc.caller, "POST", "/v1/suites", spec, &su)
			if code != tc.want || !strings.Contains(body, tc.says) {
				t.Fatalf("create a suite with run_as %q = %d %s, want %d saying %q", tc.runAs, code, body, tc.want, tc.says)
			}
			if code == http.StatusCreated && su.RunAs != tc.runAs {
				t.Errorf("created suite's run_as = %q, want %q", su.RunAs, tc.runAs)
			}
		})
	}
}

// TestServiceUserNeedsAGroupAdmin: a service may run with the agent's own
// rights (user root or agent) only when an admin of the node's group
// starts it; a writer may name an unprivileged user or none. A start
// that passes this check goes on to the agent (here: not connected, 503).
func TestServiceUserNeedsAGroupAdmin(t *testing.T) {
	ts := newTestServer(t)
	ts.nodeNamed(t, "svc-host", "a")
	writer := ts.user(t, "wanda", false, map[string]string{"a": api.RoleWrite})
	groupAdmin := ts.user(t, "gina", false, map[string]string{"a": api.RoleAdmin})
	tests := []struct {
		name   string
		caller string
		user   string
		want   int
	}{
		{"writer, default user", writer, "", http.StatusServiceUnavailable},
		{"writer, a named user", writer, "nobody", http.StatusServiceUnavailable},
		{"writer, root", writer, "root", http.StatusForbidden},
		{"writer, the agent's user", writer, "agent", http.StatusForbidden},
		{"group admin, root", groupAdmin, "root", http.StatusServiceUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := api.ServiceSpec{Coordinate: "1.web.ops.prod", Artifact: "acme:web:1.0", Command: []string{"bin/web"}, User: tc.user}
			code, body := ts.call(t, tc.caller, "POST", "/v1/nodes/svc-host/services", spec, nil)
			if code != tc.want || (code == http.StatusForbidden && !strings.Contains(body, "user")) {
				t.Errorf("start a service as %q = %d %s, want %d", tc.user, code, body, tc.want)
			}
		})
	}
}

// TestSubmitChecksTheSuiteNow: a submit reads a suite's spec once (it
// never changes), but its access and its state are checked at every
// submit: a user of another group still finds no suite, and a cancelled
// suite takes no more tasks.
func TestSubmitChecksTheSuiteNow(t *testing.T) {
	ts := newTestServer(t)
	bob := ts.user(t, "bob", false, map[string]string{"a": api.RoleWrite})
	eve := ts.user(t, "eve", false, map[string]string{"b": api.RoleWrite})
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, bob, "POST", "/v1/suites",
		api.SuiteSpec{Name: "build", Group: "a", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	tasks := api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}}
	path := "/v1/suites/" + su.ID + "/tasks"
	ts.mustCall(t, http.StatusCreated, bob, "POST", path, tasks, nil)

	if code, body := ts.call(t, eve, "POST", path, tasks, nil); code != http.StatusNotFound {
		t.Errorf("another group's writer submitting = %d %s, want 404", code, body)
	}
	ts.mustCall(t, http.StatusOK, bob, "POST", "/v1/suites/"+su.ID+"/cancel", nil, nil)
	code, body := ts.call(t, bob, "POST", path, tasks, nil)
	if code != http.StatusConflict || !strings.Contains(body, api.SuiteCancelled) {
		t.Errorf("submitting to the cancelled suite = %d %s, want 409 saying it is %s", code, body, api.SuiteCancelled)
	}
}
