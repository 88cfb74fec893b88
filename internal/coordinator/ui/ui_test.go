package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/coordinator/server"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
	"github.com/nodemgr/nodemgr/internal/coordinator/ui"
	_ "github.com/nodemgr/nodemgr/internal/drivers/all" // pools and templates name providers
)

// The dashboard's tests run it inside a real server over a SQLite store:
// the ui has no API of its own to fake.

type env struct {
	t     testing.TB
	url   string
	admin string
	api   *client.Client
	st    *sqlite.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := server.New(server.Config{DataDir: dir, Dashboard: ui.Config{PollInterval: 20 * time.Millisecond, Heartbeat: 100 * time.Millisecond}}, st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	admin, _, err := server.Bootstrap(t.Context(), st, dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, url: hs.URL, admin: admin, api: client.New(hs.URL, admin), st: st}
}

// browser is an HTTP client with cookies that does not follow redirects.
type browser struct {
	e *env
	c *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (b *browser) get(path string) (*http.Response, string) {
	b.e.t.Helper()
	resp, err := b.c.Get(b.e.url + path)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	b.e.t.Helper()
	resp, err := b.c.PostForm(b.e.url+path, form)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%.1500s", page)
	}
	return m[1]
}

// login logs b in with token and returns the session's CSRF token.
func (b *browser) login(token string) string {
	t := b.e.t
	t.Helper()
	_, page := b.get("/ui/login")
	resp, body := b.post("/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {token}, "return": {"/ui/suites"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/suites" {
		t.Fatalf("login = %d to %q, want 303 to /ui/suites: %.500s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	_, page = b.get("/ui/suites")
	return csrfOf(t, page)
}

func TestLogin(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	resp, _ := b.get("/ui/nodes?status=online")
	if want := "/ui/login?return=" + url.QueryEscape("/ui/nodes?status=online"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("GET a page without a session = %d to %q, want 303 to %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	_, page := b.get("/ui/login?return=" + url.QueryEscape("/ui/nodes?status=online"))
	csrf := csrfOf(t, page)
	if !strings.Contains(page, `name="return" value="/ui/nodes?status=online"`) {
		t.Error("the login form does not carry the page to return to")
	}

	// Each case opens the form afresh: every login page sets a new
	// double-submit token.
	tests := []struct {
		name  string
		form  url.Values
		code  int
		where string
	}{
		{"no CSRF token", url.Values{"token": {e.admin}, "csrf": nil}, http.StatusForbidden, ""},
		{"wrong CSRF token", url.Values{"token": {e.admin}, "csrf": {"x" + csrf}}, http.StatusForbidden, ""},
		{"no token", url.Values{}, http.StatusBadRequest, ""},
		{"a wrong token", url.Values{"token": {"nmu_nottherightone"}}, http.StatusUnauthorized, ""},
		{"elsewhere is not a return", url.Values{"token": {e.admin}, "return": {"//evil.example/"}}, http.StatusSeeOther, "/ui/"},
		{"the right token", url.Values{"token": {e.admin}, "return": {"/ui/nodes?status=online"}}, http.StatusSeeOther, "/ui/nodes?status=online"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, page := b.get("/ui/login")
			if _, set := tc.form["csrf"]; !set {
				tc.form.Set("csrf", csrfOf(t, page))
			}
			resp, body := b.post("/ui/login", tc.form)
			if resp.StatusCode != tc.code || resp.Header.Get("Location") != tc.where {
				t.Fatalf("POST /ui/login = %d to %q, want %d to %q: %.300s", resp.StatusCode, resp.Header.Get("Location"), tc.code, tc.where, body)
			}
		})
	}
	raw := loginSetCookie(t, e)
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui"} {
		if !strings.Contains(raw, want) {
			t.Errorf("session cookie %q lacks %s", raw, want)
		}
	}
	resp, page = b.get("/ui/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Overview") {
		t.Fatalf("GET /ui/ after login = %d: %.500s", resp.StatusCode, page)
	}
	// Logging out ends the session.
	if resp, _ := b.post("/ui/logout", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout = %d, want 303", resp.StatusCode)
	}
	if resp, _ := b.get("/ui/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a page after logout = %d, want 303 to the login", resp.StatusCode)
	}
}

// loginSetCookie logs in with a fresh client and returns the session's
// Set-Cookie header.
func loginSetCookie(t *testing.T, e *env) string {
	t.Helper()
	b := e.browser()
	resp, page := b.get("/ui/login")
	var login string
	for _, c := range resp.Cookies() {
		if c.Name == "nodemgr_login" {
			login = c.Value
		}
	}
	if login == "" {
		t.Fatal("the login page set no login cookie")
	}
	resp, _ = b.post("/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {e.admin}})
	for _, c := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "nodemgr_session=") {
			return c
		}
	}
	t.Fatalf("no session Set-Cookie in %v", resp.Header.Values("Set-Cookie"))
	return ""
}

func TestSessionEndsWithItsToken(t *testing.T) {
	e := newEnv(t)
	tk, err := e.api.CreateToken(t.Context(), api.CreateTokenRequest{Name: "short", TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(tk.Secret)
	_, page := b.get("/ui/")
	m := regexp.MustCompile(`data-expires="(\d+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the page does not say when the session ends")
	}
	ms, _ := strconv.ParseInt(m[1], 10, 64)
	if got := time.Until(time.UnixMilli(ms)); got > time.Hour || got < 59*time.Minute {
		t.Errorf("the session of a 1h token ends in %s, want about 1h (the token's end, not the 12h default)", got)
	}
}

func TestLoginAttemptsAreLimited(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	codes := map[int]int{}
	for range 15 {
		_, page := b.get("/ui/login")
		resp, _ := b.post("/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {"nmu_wrong"}})
		codes[resp.StatusCode]++
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusUnauthorized] == 0 {
		t.Errorf("15 wrong logins answered %v; want some 401 and then 429", codes)
	}
}

func createSuite(t *testing.T, c *client.Client, name, group string) api.Suite {
	t.Helper()
	s, err := c.CreateSuite(t.Context(), api.SuiteSpec{Name: name, Group: group, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestForgedPostIsRefused(t *testing.T) {
	e := newEnv(t)
	su := createSuite(t, e.api, "victim", "")
	b := e.browser()
	csrf := b.login(e.admin)
	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"no CSRF token", url.Values{"return": {"/ui/"}}},
		{"another token", url.Values{"csrf": {"A" + csrf[1:]}, "return": {"/ui/"}}},
	} {
		resp, _ := b.post("/ui/suites/"+su.ID+"/cancel", tc.form)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: POST cancel = %d, want 403", tc.name, resp.StatusCode)
		}
	}
	if got, _ := e.api.Suite(t.Context(), su.ID); got.State != api.SuiteOpen {
		t.Fatalf("after forged POSTs the suite is %s, want Open", got.State)
	}
	// A cookie alone, with no session behind it, is no better.
	other := e.browser()
	if resp, _ := other.post("/ui/suites/"+su.ID+"/cancel", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without a session = %d, want 403", resp.StatusCode)
	}
	resp, _ := b.post("/ui/suites/"+su.ID+"/cancel", url.Values{"csrf": {csrf}, "return": {"/ui/suites/" + su.ID}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST cancel with the CSRF token = %d, want 303", resp.StatusCode)
	}
	if got, _ := e.api.Suite(t.Context(), su.ID); got.State != api.SuiteCancelled {
		t.Errorf("after the real POST the suite is %s, want Cancelled", got.State)
	}
	_, page := b.get("/ui/suites/" + su.ID)
	if !strings.Contains(page, "cancelled.") {
		t.Errorf("the page after the action does not say what happened:\n%.2000s", page)
	}
}

func TestReaderHasNoCancelButton(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.api.CreateUser(ctx, api.CreateUserRequest{Name: "reader", Groups: map[string]string{"ml": api.RoleRead}}); err != nil {
		t.Fatal(err)
	}
	tk, err := e.api.CreateToken(ctx, api.CreateTokenRequest{User: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	su := createSuite(t, e.api, "ml-work", "ml")
	hidden := createSuite(t, e.api, "ops-work", "ops")
	for _, tc := range []struct {
		who    string
		token  string
		cancel bool
	}{{"admin", e.admin, true}, {"reader", tk.Secret, false}} {
		b := e.browser()
		csrf := b.login(tc.token)
		_, page := b.get("/ui/suites/" + su.ID)
		if got := strings.Contains(page, `id="cancel-suite"`); got != tc.cancel {
			t.Errorf("%s: cancel button shown = %v, want %v", tc.who, got, tc.cancel)
		}
		_, list := b.get("/ui/suites")
		if got := strings.Contains(list, hidden.ID); got != tc.cancel {
			t.Errorf("%s: suite of group ops listed = %v, want %v", tc.who, got, tc.cancel)
		}
		if tc.who == "reader" {
			// The button is only hidden: the API decides, and says why.
			b.post("/ui/suites/"+su.ID+"/cancel", url.Values{"csrf": {csrf}, "return": {"/ui/suites/" + su.ID}})
			_, page := b.get("/ui/suites/" + su.ID)
			if !strings.Contains(page, `class="banner bad"`) {
				t.Errorf("a reader's cancel shows no refusal:\n%.2000s", page)
			}
			if got, _ := e.api.Suite(ctx, su.ID); got.State != api.SuiteOpen {
				t.Errorf("a reader cancelled the suite: %s", got.State)
			}
		}
	}
}

func TestListsPageOnTheServer(t *testing.T) {
	e := newEnv(t)
	for i := range 120 {
		createSuite(t, e.api, fmt.Sprintf("s%03d", i), "")
	}
	b := e.browser()
	b.login(e.admin)
	next := regexp.MustCompile(`href="([^"]+)" id="next-page"`)
	path, pages, rows := "/ui/suites", 0, 0
	for path != "" {
		resp, page := b.get(path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
		n := strings.Count(page, "<tr data-suite=")
		if n > 50 {
			t.Fatalf("a page has %d rows, want at most 50", n)
		}
		rows += n
		pages++
		path = ""
		if m := next.FindStringSubmatch(page); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if pages != 3 || rows != 120 {
		t.Errorf("paging showed %d rows on %d pages, want 120 on 3", rows, pages)
	}
	_, page := b.get("/ui/suites?state=Complete")
	if strings.Contains(page, "<tr data-suite=") {
		t.Error("the Complete filter shows Open suites")
	}
	resp, page := b.get("/ui/suites?after=bogus")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "after") {
		t.Errorf("a bad cursor = %d, want 400 with the API's explanation: %.300s", resp.StatusCode, page)
	}
}

// sse reads one event stream.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
}

type sseEvent struct {
	id   uint64
	typ  string
	data string
}

func (b *browser) events(t *testing.T, since, lastEventID string) *sse {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.e.url+"/ui/events?since="+since, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /ui/events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &sse{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next reads the next event, skipping comments; ok false at a deadline.
func (s *sse) next(t *testing.T, timeout time.Duration) (sseEvent, bool, int) {
	t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(timeout, func() { s.resp.Body.Close(); close(done) })
	defer timer.Stop()
	var e sseEvent
	comments := 0
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return e, false, comments
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if e.typ != "" {
				return e, true, comments
			}
		case strings.HasPrefix(line, ":"):
			comments++
		case strings.HasPrefix(line, "id: "):
			e.id, _ = strconv.ParseUint(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			e.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			e.data = line[6:]
		}
	}
}

func TestEventsResumeWithLastEventID(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.login(e.admin)
	_, page := b.get("/ui/suites")
	since := regexp.MustCompile(`data-since="(\d+)"`).FindStringSubmatch(page)[1]
	ctx := context.Background()

	// Changes while a stream is open, then while none is, then again.
	stream := b.events(t, since, "")
	su := createSuite(t, e.api, "live", "")
	var seen []sseEvent
	waitEvent := func(s *sse, cond func(sseEvent) bool) {
		t.Helper()
		for {
			ev, ok, _ := s.next(t, 5*time.Second)
			if !ok {
				t.Fatalf("no event came; saw %v", seen)
			}
			seen = append(seen, ev)
			if cond(ev) {
				return
			}
		}
	}
	waitEvent(stream, func(ev sseEvent) bool { return ev.typ == "suite" && strings.Contains(ev.data, su.ID) })
	stream.resp.Body.Close() // the drop
	last := seen[len(seen)-1].id

	for i := range 5 {
		if _, err := e.api.SubmitTasks(ctx, su.ID, []api.TaskSpec{{Argv: []string{"true"}, Name: fmt.Sprint("t", i)}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Millisecond) // two polls: each submit its own event
	}
	if _, err := e.api.CancelSuite(ctx, su.ID); err != nil {
		t.Fatal(err)
	}
	// The browser reconnects with the id of the last event it got.
	again := b.events(t, "0", strconv.FormatUint(last, 10))
	waitEvent(again, func(ev sseEvent) bool { return ev.typ == "suite" && strings.Contains(ev.data, `"state":"cancelled"`) })
	for i := 1; i < len(seen); i++ {
		if seen[i].id != seen[i-1].id+1 {
			t.Fatalf("event %d follows %d: the resumed stream lost events (%v)", seen[i].id, seen[i-1].id, seen)
		}
	}
	if seen[0].id != mustUint(since)+1 {
		t.Errorf("the first event is %d, want %s+1", seen[0].id, since)
	}
	var counts []string
	for _, ev := range seen {
		if ev.typ == "suite" {
			counts = append(counts, regexp.MustCompile(`"ready":\d+`).FindString(ev.data))
		}
	}
	if len(counts) < 3 {
		t.Errorf("suite events %v; want the suite's counts to move in several steps across the drop", counts)
	}

	// An id the server no longer has (or never had) resets the page.
	stale := b.events(t, "0", "999999")
	ev, ok, _ := stale.next(t, 5*time.Second)
	if !ok || ev.typ != "reset" {
		t.Errorf("a stream from an unknown id starts with %+v, want a reset event", ev)
	}
	stale.resp.Body.Close()

	// An idle stream gets heartbeat comments.
	idle := b.events(t, "0", strconv.FormatUint(seen[len(seen)-1].id, 10))
	if _, _, comments := idle.next(t, 400*time.Millisecond); comments == 0 {
		t.Error("an idle stream got no heartbeat comment")
	}
}

func mustUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func TestEventsNeedASession(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.url + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui/events without a session = %d, want 401", resp.StatusCode)
	}
}

func TestRenewKeepsThePage(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	b := e.browser()
	csrf := b.login(e.admin)
	renew := func(token, csrfToken string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/ui/renew", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-CSRF-Token", csrfToken)
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := renew("", "wrong"); code != http.StatusForbidden {
		t.Errorf("renew without the CSRF token = %d, want 403", code)
	}
	if code, body := renew("", csrf); code != http.StatusOK || !strings.Contains(body, `"expires"`) {
		t.Errorf("renew with the same token = %d %s, want 200 with the new end", code, body)
	}
	short, err := e.api.CreateToken(ctx, api.CreateTokenRequest{TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	code, body := renew(short.Secret, csrf)
	m := regexp.MustCompile(`"expires":(\d+)`).FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("renew with a new token = %d %s", code, body)
	}
	if end := time.UnixMilli(mustInt(m[1])); time.Until(end) > time.Hour {
		t.Errorf("renewed with a 1h token, the session ends in %s", time.Until(end))
	}
	if _, err := e.api.CreateUser(ctx, api.CreateUserRequest{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	other, err := e.api.CreateToken(ctx, api.CreateTokenRequest{User: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := renew(other.Secret, csrf); code != http.StatusBadRequest || !strings.Contains(body, "other") {
		t.Errorf("renew with another user's token = %d %s, want 400 naming them", code, body)
	}
	// The session still works, with the renewed token.
	if resp, _ := b.get("/ui/suites"); resp.StatusCode != http.StatusOK {
		t.Errorf("a page after renewing = %d", resp.StatusCode)
	}
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func TestPoolAndDeploymentActions(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	tmpl := "name: small\ncpu: 1\nmemoryMB: 256\nimage: busybox\n"
	if _, err := e.api.PutDocument(ctx, "templates", "small", []byte(tmpl)); err != nil {
		t.Fatal(err)
	}
	spec := api.PoolSpec{Name: "batch", Template: "small", Provider: "local", Min: 0, Max: 2}
	if err := e.api.Do(ctx, http.MethodPut, "/v1/pools/batch", spec, nil); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	csrf := b.login(e.admin)
	_, page := b.get("/ui/pools/batch")
	if !strings.Contains(page, `name="max"`) || !strings.Contains(page, `id="delete-pool"`) {
		t.Fatalf("the pool page has no scale form or delete button:\n%.2000s", page)
	}
	if resp, _ := b.post("/ui/pools/batch/scale", url.Values{"csrf": {csrf}, "min": {"0"}, "max": {"5"}, "return": {"/ui/pools/batch"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("scale = %d, want 303", resp.StatusCode)
	}
	var p api.PoolDetail
	if err := e.api.Do(ctx, http.MethodGet, "/v1/pools/batch", nil, &p); err != nil || p.Spec.Max != 5 || p.Spec.Template != "small" {
		t.Errorf("after scaling on the page the pool is %+v (%v); want max 5 and the rest kept", p.Spec, err)
	}
	b.post("/ui/pools/batch/scale", url.Values{"csrf": {csrf}, "min": {"x"}, "max": {"5"}, "return": {"/ui/pools/batch"}})
	if _, page := b.get("/ui/pools/batch"); !strings.Contains(page, "whole numbers") {
		t.Error("a scale with a bad min shows no error")
	}
	if resp, _ := b.post("/ui/pools/batch/delete", url.Values{"csrf": {csrf}, "return": {"/ui/pools"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete = %d, want 303", resp.StatusCode)
	}
	if err := e.api.Do(ctx, http.MethodGet, "/v1/pools/batch", nil, &p); err == nil {
		t.Error("the pool is still there after deleting it on the page")
	}
	b.post("/ui/deployments/d-nope/destroy", url.Values{"csrf": {csrf}, "return": {"/ui/deployments"}})
	if _, page := b.get("/ui/deployments"); !strings.Contains(page, `class="banner bad"`) {
		t.Error("destroying a deployment that does not exist shows no error")
	}
}

func TestLogPages(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.login(e.admin)
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/ui/logs", "name a log", http.StatusBadRequest},
		{"/ui/logs?container=j-nope", "j-nope", http.StatusNotFound},
		{"/ui/logs/more?node=n-nope&service=a.b.c.d", "n-nope", http.StatusNotFound},
	} {
		resp, page := b.get(tc.path)
		if resp.StatusCode != tc.code || !strings.Contains(page, tc.want) {
			t.Errorf("GET %s = %d, want %d saying %q: %.300s", tc.path, resp.StatusCode, tc.code, tc.want, page)
		}
	}
}

func TestRevokedTokenEndsTheSession(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	tk, err := e.api.CreateToken(ctx, api.CreateTokenRequest{Name: "soon-revoked"})
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(tk.Secret)
	if err := e.api.DeleteToken(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	if resp, _ := b.get("/ui/suites"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Errorf("a page after the token was revoked = %d to %q, want 303 to the login", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestListsSayWhySuitesWait: a suite with Ready tasks that runs nowhere
// says why, in one line, in the suite list's API answer and on the
// overview and suites pages, as on its own page.
func TestListsSayWhySuitesWait(t *testing.T) {
	e := newEnv(t)
	su := createSuite(t, e.api, "stuck", "")
	if _, err := e.api.SubmitTasks(t.Context(), su.ID, []api.TaskSpec{{Argv: []string{"true"}}}); err != nil {
		t.Fatal(err)
	}
	const why = "no node is registered yet"
	suites, err := e.api.Suites(t.Context(), "")
	if err != nil || len(suites) != 1 || !strings.Contains(suites[0].WaitingReason, why) {
		t.Fatalf("suite list = %+v, %v; want the suite, waiting because %s", suites, err, why)
	}
	b := e.browser()
	b.login(e.admin)
	for _, page := range []string{"/ui/", "/ui/suites"} {
		if _, body := b.get(page); !strings.Contains(body, "Waiting: "+why) {
			t.Errorf("%s does not say the suite waits because %s", page, why)
		}
	}
}
