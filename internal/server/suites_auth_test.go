package server

import (
	"net/http"
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
