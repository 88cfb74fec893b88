package server

import (
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
