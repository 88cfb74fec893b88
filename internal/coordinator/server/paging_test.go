package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// walk follows a list's next from the top and returns every page's items
// (as the list's ids) and how many pages it took.
func walk[L any](t *testing.T, ts *testServer, token, path string, items func(L) ([]string, string)) ([]string, int) {
	t.Helper()
	var all []string
	after := ""
	for pages := 1; ; pages++ {
		if pages > 100 {
			t.Fatalf("GET %s: still paging after 100 pages", path)
		}
		p := path
		if after != "" {
			p += "&after=" + url.QueryEscape(after)
		}
		var l L
		ts.mustCall(t, http.StatusOK, token, "GET", p, nil, &l)
		ids, next := items(l)
		all = append(all, ids...)
		if next == "" {
			return all, pages
		}
		after = next
	}
}

func taskIDs(l api.TaskList) ([]string, string) {
	var ids []string
	for _, tk := range l.Tasks {
		ids = append(ids, tk.ID)
	}
	return ids, l.Next
}

// TestTaskListPagesPastAThousand is the defect of issue 12 item 14: a
// suite's task list stopped at 1,000 rows with no hint and no cursor.
func TestTaskListPagesPastAThousand(t *testing.T) {
	ts := newTestServer(t)
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "big", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	specs := make([]api.TaskSpec, 1500)
	for i := range specs {
		specs[i] = api.TaskSpec{Argv: []string{"echo", fmt.Sprint(i)}}
	}
	var submitted api.SubmitResult
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/big/tasks", api.SubmitTasks{Tasks: specs}, &submitted)

	for _, tc := range []struct {
		limit     string
		wantPages int
	}{
		{"", 15}, // the default page is 100
		{"1000", 2},
		{"70", 22},
	} {
		t.Run("limit="+tc.limit, func(t *testing.T) {
			path := "/v1/suites/big/tasks?limit=" + tc.limit
			if tc.limit == "" {
				path = "/v1/suites/big/tasks?state="
			}
			got, pages := walk(t, ts, ts.admin, path, taskIDs)
			if !slices.Equal(got, submitted.IDs) {
				t.Errorf("GET %s walked %d tasks, want the 1500 submitted in order", path, len(got))
			}
			if pages != tc.wantPages {
				t.Errorf("GET %s took %d pages, want %d", path, pages, tc.wantPages)
			}
		})
	}
}

// TestListsPage walks every list of the server's own store a few rows at a
// time: each row once, in order, and no next on the last page.
func TestListsPage(t *testing.T) {
	ts := newTestServer(t)
	for i := range 7 {
		name := fmt.Sprintf("u%d", i)
		ts.user(t, name, false, map[string]string{"g": api.RoleRead})
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Name: name}, nil)
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s" + name, Priority: i % 3, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, nil)
	}
	for _, node := range []string{"n1", "n2"} {
		id, _ := ts.nodeNamed(t, node)
		for i := range 3 {
			c := api.Container{Job: api.ContainerJob{ID: fmt.Sprintf("%s-c%d", node, i), Image: "x"}, Status: api.ContainerRunning}
			if err := ts.store.PutContainers(t.Context(), id, []api.Container{c}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		path  string
		items func(raw json.RawMessage) ([]string, string)
		want  int
	}{
		{"/v1/users?limit=3", decodeList(func(l api.UserList) ([]string, string) {
			return names(l.Users, func(u api.User) string { return u.Name }), l.Next
		}), 8}, // and admin
		{"/v1/tokens?limit=2", decodeList(func(l api.TokenList) ([]string, string) {
			return names(l.Tokens, func(tk api.Token) string { return tk.ID }), l.Next
		}), 8},
		{"/v1/join-tokens?limit=4", decodeList(func(l api.TokenList) ([]string, string) {
			return names(l.Tokens, func(tk api.Token) string { return tk.ID }), l.Next
		}), 9}, // and the two nodes'
		{"/v1/suites?limit=3", decodeList(func(l api.SuiteList) ([]string, string) {
			return names(l.Suites, func(su api.Suite) string { return su.ID }), l.Next
		}), 7},
		{"/v1/containers?limit=4", decodeList(func(l api.ContainerList) ([]string, string) {
			return names(l.Containers, func(c api.Container) string { return c.Job.ID }), l.Next
		}), 6},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			var whole json.RawMessage
			ts.mustCall(t, http.StatusOK, ts.admin, "GET", strings.Split(tc.path, "?")[0], nil, &whole)
			want, next := tc.items(whole)
			if next != "" || len(want) != tc.want {
				t.Fatalf("GET %s whole = %d items, next %q; want %d, no next", tc.path, len(want), next, tc.want)
			}
			got, _ := walk(t, ts, ts.admin, tc.path, tc.items)
			if !slices.Equal(got, want) {
				t.Errorf("GET %s walked %v, want %v", tc.path, got, want)
			}
		})
	}
}

func decodeList[L any](items func(L) ([]string, string)) func(json.RawMessage) ([]string, string) {
	return func(raw json.RawMessage) ([]string, string) {
		var l L
		if err := json.Unmarshal(raw, &l); err != nil {
			panic(err)
		}
		return items(l)
	}
}

func names[T any](items []T, name func(T) string) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, name(it))
	}
	return out
}

// TestSuitePagesSkipHidden: suites a user may not read do not count
// against a page, so a page is short only at the end of the list.
func TestSuitePagesSkipHidden(t *testing.T) {
	ts := newTestServer(t)
	bob := ts.user(t, "bob", false, map[string]string{"b": api.RoleWrite})
	var mine []string
	for i := range 12 {
		token, group := ts.admin, "a"
		if i%3 == 0 {
			token, group = bob, "b"
		}
		var su api.Suite
		ts.mustCall(t, http.StatusCreated, token, "POST", "/v1/suites", api.SuiteSpec{Name: fmt.Sprint("s", i), Group: group, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
		if group == "b" {
			mine = append(mine, su.ID)
		}
	}
	var first api.SuiteList
	ts.mustCall(t, http.StatusOK, bob, "GET", "/v1/suites?limit=2", nil, &first)
	if len(first.Suites) != 2 || first.Next == "" {
		t.Fatalf("bob's first page of 2 = %d suites, next %q; want 2 and a next", len(first.Suites), first.Next)
	}
	got, _ := walk(t, ts, bob, "/v1/suites?limit=2", func(l api.SuiteList) ([]string, string) {
		return names(l.Suites, func(su api.Suite) string { return su.ID }), l.Next
	})
	if !slices.Equal(got, mine) {
		t.Errorf("bob's suites paged by 2 = %v, want %v", got, mine)
	}
}

// TestListPagingErrors: a bad limit is a 400 naming limit; a cursor that
// is not one, or belongs to another list or other filters, a 400 naming
// after.
func TestListPagingErrors(t *testing.T) {
	ts := newTestServer(t)
	for _, name := range []string{"one", "two"} {
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: name, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, nil)
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+name+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"a"}}, {Argv: []string{"b"}}}}, nil)
	}
	ts.user(t, "u1", false, nil)
	next := func(path string) string {
		var l struct {
			Next string `json:"next"`
		}
		ts.mustCall(t, http.StatusOK, ts.admin, "GET", path, nil, &l)
		if l.Next == "" {
			t.Fatalf("GET %s gave no next", path)
		}
		return url.QueryEscape(l.Next)
	}
	users := next("/v1/users?limit=1")
	oneTasks := next("/v1/suites/one/tasks?limit=1")
	readyTasks := next("/v1/suites/one/tasks?limit=1&state=Ready")

	tests := []struct {
		name, path, field string
	}{
		{"limit zero", "/v1/users?limit=0", "limit"},
		{"limit negative", "/v1/nodes?limit=-1", "limit"},
		{"limit over the max", "/v1/suites/one/tasks?limit=1001", "limit"},
		{"limit not a number", "/v1/tokens?limit=ten", "limit"},
		{"limit empty", "/v1/templates?limit=", "limit"},
		{"after not a cursor", "/v1/suites?after=garbage", "after"},
		{"after base64 of junk", "/v1/suites?after=" + url.QueryEscape("eyJzIjoiIn0"), "after"},
		{"after from another list", "/v1/tokens?after=" + users, "after"},
		{"after from another suite", "/v1/suites/two/tasks?after=" + oneTasks, "after"},
		{"after with another filter", "/v1/suites/one/tasks?state=Ready&after=" + oneTasks, "after"},
		{"after with the filter dropped", "/v1/suites/one/tasks?after=" + readyTasks, "after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.call(t, ts.admin, "GET", tc.path, nil, nil)
			var e struct {
				Error struct{ Code, Field, Message string }
			}
			json.Unmarshal([]byte(body), &e)
			if code != http.StatusBadRequest || e.Error.Field != tc.field || e.Error.Message == "" {
				t.Errorf("GET %s = %d %s, want 400 naming %s", tc.path, code, body, tc.field)
			}
		})
	}
	// The cursor works where it came from.
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/one/tasks?limit=1&after="+oneTasks, nil, nil)
}
