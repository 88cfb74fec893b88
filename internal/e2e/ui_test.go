package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// The dashboard's tests drive Debian's Chromium headless through chromedp,
// against the real server and agent binaries. They never download a
// browser: without Chromium they skip, unless NODEMGR_REQUIRE_CHROMIUM=1
// (CI installs it), where they fail.

// chromiumPath finds the browser, or skips (or fails) the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("NODEMGR_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("NODEMGR_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("Chromium is required (NODEMGR_REQUIRE_CHROMIUM=1) but neither $NODEMGR_CHROMIUM nor /usr/bin/chromium exists; apt-get install chromium")
	}
	t.Skip("no Chromium at /usr/bin/chromium (apt-get install chromium, or set NODEMGR_CHROMIUM); the dashboard's browser tests need it")
	return ""
}

// browser is one headless Chromium with a fresh profile: its own cookies.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string

	mu      sync.Mutex
	console []string // script exceptions and policy violations the pages caused
}

func newBrowser(t *testing.T, base, shots string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser (no timeout: it would stop it)
		t.Fatalf("start Chromium: %v", err)
	}
	b := &browser{t: t, ctx: ctx, base: base, shots: shots}
	b.watchConsole(t)
	return b
}

// watchConsole keeps the pages' script exceptions and Content Security
// Policy violations, and fails the test with them when it ends: the
// dashboard's pages must run clean under their own strict policy.
func (b *browser) watchConsole(t *testing.T) {
	messages := chromedp.Console(b.ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			text := m.String()
			if m.IsException() || strings.Contains(text, "Content Security Policy") {
				b.mu.Lock()
				b.console = append(b.console, text)
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { // runs before the browser stops (cleanups run last first)
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, m := range b.console {
			t.Errorf("browser console: %s", m)
		}
	})
}

// run runs steps with a deadline.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

func (b *browser) open(path string) {
	b.t.Helper()
	b.run("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitReady(chromedp.CSS("body")))
}

// eval evaluates JavaScript in b's page (awaiting a promise) and returns
// its value.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// text is the text of the first element matching sel, "" when none.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(function(){var e=document.querySelector(%q);return e?e.textContent.trim():""})()`, sel))
}

func (b *browser) exists(sel string) bool {
	b.t.Helper()
	return eval[bool](b, fmt.Sprintf(`document.querySelector(%q)!==null`, sel))
}

// screenshot saves the whole page as name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("save screenshot: %v", err)
	}
}

// login logs in with token from the login form, opening it unless the
// browser is on it already (sent there by a page, which it returns to).
func (b *browser) login(token string) {
	b.t.Helper()
	if !b.exists("#login-form") {
		b.open("/ui/login")
	}
	b.run("log in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("header.top")))
}

// screenshotDir is $NODEMGR_UI_SCREENSHOTS, else a new temp dir that
// outlives the test, so that the pictures can be looked at.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("NODEMGR_UI_SCREENSHOTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "nodemgr-ui-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshots in %s", dir)
	return dir
}

func TestDashboardInBrowser(t *testing.T) {
	chromiumPath(t)
	shots := screenshotDir(t)
	s := startServer(t)
	startOnline(t, s, "dev", "--group", "ml", "--tag", "linux")
	ctx := context.Background()
	admin := s.client()
	for _, args := range [][]string{
		{"template", "apply", "-f", seedTemplate},
		{"mapping", "apply", "-f", seedMapping, "--name", "ubuntu"},
	} {
		if out, errOut, code := s.run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errOut)
		}
	}

	b := newBrowser(t, s.url(), shots)
	t.Run("log in", func(t *testing.T) {
		b.t = t
		b.open("/ui/nodes")
		if !b.exists("#login-form") {
			t.Fatal("a page without a session did not send the browser to the login form")
		}
		b.screenshot("01-login")
		b.login(s.token)
		path := eval[string](b, "location.pathname")
		if path != "/ui/nodes" {
			t.Errorf("after login the browser is at %s, want /ui/nodes (the page it asked for)", path)
		}
	})

	t.Run("node list shows the agent online", func(t *testing.T) {
		b.t = t
		b.open("/ui/nodes")
		waitFor(t, 10*time.Second, "dev online in the node list", func() (bool, string) {
			got := b.text(`#nodes tr[data-node] [data-status]`)
			return got == api.StatusOnline, got
		})
		b.screenshot("03-nodes")
		n, _ := nodeByName(t, s, "dev")
		b.open("/ui/nodes/" + n.ID)
		if got := b.text("h1 [data-status]"); got != api.StatusOnline {
			t.Errorf("node page status = %q, want online", got)
		}
		// The charts draw the samples the agent's heartbeats carried.
		if !b.exists(".chart-card svg.chart polyline") {
			t.Errorf("the node page has no CPU chart: %q", b.text(".chart-card"))
		}
		b.screenshot("04-node")
	})

	var progressed api.Suite
	t.Run("a suite's progress advances live", func(t *testing.T) {
		b.t = t
		su := createSuite(t, s, api.SuiteSpec{Name: "ui-progress", Group: "ml",
			WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
		b.open("/ui/suites/" + su.ID)
		eval[chromedp.Void](b, `window.__sameDocument = true`)
		var tasks []api.TaskSpec
		for i := range 30 {
			spec := sh("sleep 0.25; echo task " + fmt.Sprint(i))
			spec.Name = fmt.Sprintf("t%02d", i)
			tasks = append(tasks, spec)
		}
		tasks = append(tasks, sh("echo boom >&2; exit 3"))
		submit(t, s, su.ID, tasks)
		seen := map[string]bool{}
		waitFor(t, 60*time.Second, "the progress bar to reach 100% without a reload", func() (bool, string) {
			pct := b.text(`.progress-head [data-percent]`)
			seen[pct] = true
			return pct == "100", pct
		})
		// What the events do not carry comes live too (issue 31 item 9: the
		// Failures panel said "None." beside "1 failed", the rows froze).
		waitFor(t, 20*time.Second, "the Failures panel to list the failed task without a reload", func() (bool, string) {
			return b.exists(`#failures a[href^="/ui/tasks/"]`), b.text("#failures")
		})
		waitFor(t, 20*time.Second, "the task rows to show Finished tasks without a reload", func() (bool, string) {
			got := b.text("#task-rows")
			return strings.Contains(got, api.TaskFinished), got
		})
		age := b.text(`#suite-info time[data-ago]`)
		waitFor(t, 10*time.Second, "the suite's age to count on", func() (bool, string) {
			got := b.text(`#suite-info time[data-ago]`)
			return got != age, got
		})
		same := eval[bool](b, `window.__sameDocument === true`)
		if !same {
			t.Error("the page reloaded; the progress must advance live")
		}
		if len(seen) < 3 {
			t.Errorf("the bar showed only %v on its way to 100%%; want it to advance in steps", seen)
		}
		if _, err := admin.CloseSuite(ctx, su.ID); err != nil {
			t.Fatal(err)
		}
		progressed = waitSuite(t, s, su.ID, api.SuiteComplete, 20*time.Second)
		waitFor(t, 10*time.Second, "the page to show the suite Complete", func() (bool, string) {
			got := b.text(`.head [data-state]`)
			return got == api.SuiteComplete, got
		})
		b.open("/ui/suites/" + su.ID)
		b.screenshot("06-suite")
		b.open("/ui/suites/" + su.ID + "?state=Failed")
		if !b.exists(`#tasks a`) {
			t.Fatal("the Failed filter shows no task; want the one that exits 3")
		}
		b.run("open the failed task", chromedp.Click(chromedp.CSS(`#tasks a`)), chromedp.WaitVisible(chromedp.CSS(".attempt")))
		if got := b.text(".attempt .badge"); got != "exit 3" {
			t.Errorf("the failed attempt's badge = %q, want exit 3", got)
		}
		b.screenshot("07-task")
	})

	t.Run("a running task's output is followed live", func(t *testing.T) {
		b.t = t
		su := createSuite(t, s, api.SuiteSpec{Name: "ui-follow", Group: "ml", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
		ids := submit(t, s, su.ID, []api.TaskSpec{sh(`for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.5; done`)})
		admin.CloseSuite(ctx, su.ID)
		waitFor(t, 20*time.Second, "the task to run", func() (bool, string) {
			tk, err := admin.Task(ctx, ids[0])
			return err == nil && tk.State == api.TaskRunning, tk.State
		})
		b.open("/ui/tasks/" + ids[0])
		b.run("follow", chromedp.Click(chromedp.CSS("#follow-output")), chromedp.WaitVisible(chromedp.CSS("#log")))
		if done := eval[string](b, `document.getElementById("log").dataset.complete`); done != "false" {
			t.Fatalf("the log page of a running attempt says complete=%q", done)
		}
		waitFor(t, 20*time.Second, "the page to say the attempt ended, without a reload", func() (bool, string) {
			return strings.Contains(b.text("#log-status"), "all of its output"), b.text("#log-status")
		})
		if b.exists("#follow") {
			t.Error("the page still offers to follow an attempt that ended")
		}
		want := "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\ntick 7\ntick 8"
		if got := strings.TrimSpace(b.text("#log")); got != want {
			t.Errorf("followed log = %q, want %q", got, want)
		}
		b.screenshot("07b-task-log")
	})

	t.Run("cancel from the page", func(t *testing.T) {
		b.t = t
		su := createSuite(t, s, api.SuiteSpec{Name: "ui-cancel", Group: "ml", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
		submit(t, s, su.ID, []api.TaskSpec{sh("sleep 60"), sh("sleep 60"), sh("sleep 60")})
		waitFor(t, 20*time.Second, "a task running", func() (bool, string) {
			got, err := admin.Suite(ctx, su.ID)
			return err == nil && got.Counts.Running > 0, fmt.Sprint(got.Counts, err)
		})
		b.open("/ui/")
		b.screenshot("02-overview")
		b.open("/ui/suites")
		b.screenshot("05-suites")
		b.open("/ui/suites/" + su.ID)
		b.run("click cancel", chromedp.Click(chromedp.CSS("#cancel-suite")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
		b.screenshot("08-confirm")
		b.run("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")), chromedp.WaitVisible(chromedp.CSS(`.banner.ok`)))
		got, err := admin.Suite(ctx, su.ID)
		if err != nil || got.State != api.SuiteCancelled {
			t.Fatalf("after cancelling on the page the API says %q (%v); want Cancelled", got.State, err)
		}
		if b.exists("#cancel-suite") {
			t.Error("a cancelled suite's page still offers Cancel")
		}
	})

	t.Run("pages of an admin", func(t *testing.T) {
		b.t = t
		deps, err := admin.Provision(ctx, api.ProvisionRequest{Template: "ubuntu-worker-small", Provider: "local", Name: "here"})
		if err != nil {
			t.Fatal(err)
		}
		pool := api.PoolSpec{Name: "burst", Template: "ubuntu-worker-small", Provider: "local", Min: 0, Max: 3, Tags: []string{"burst"}}
		if err := admin.Do(ctx, "PUT", "/v1/pools/burst", pool, nil); err != nil {
			t.Fatal(err)
		}
		for i, p := range []string{"/ui/templates", "/ui/templates/ubuntu-worker-small", "/ui/mappings", "/ui/mappings/ubuntu", "/ui/pools", "/ui/pools/burst", "/ui/ensembles", "/ui/network", "/ui/deployments"} {
			b.open(p)
			if b.exists("#page-error") {
				t.Errorf("%s shows an error: %s", p, b.text("#page-error"))
			}
			b.screenshot(fmt.Sprintf("%02d-%s", 10+i, strings.ReplaceAll(strings.TrimPrefix(p, "/ui/"), "/", "-")))
			if p == "/ui/mappings/ubuntu" && b.text(".use a") != "ubuntu-worker-small" {
				t.Errorf("the mapping page lists %q among the templates it renders, want ubuntu-worker-small", b.text(".use a"))
			}
			if p == "/ui/templates/ubuntu-worker-small" && b.text(".render h3") != "local" {
				t.Errorf("the template page renders first for %q, want local", b.text(".render h3"))
			}
		}
		// Destroy the machine from the deployments page.
		b.run("destroy", chromedp.Click(chromedp.CSS(`#deployments form[data-confirm] button`)), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
		b.run("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")), chromedp.WaitVisible(chromedp.CSS(".banner.ok")))
		waitFor(t, 10*time.Second, "the deployment terminated", func() (bool, string) {
			d, err := admin.Deployment(ctx, deps[0].ID)
			return err == nil && d.State == "terminated", fmt.Sprint(d.State, err)
		})
	})

	t.Run("a node going offline shows without a reload", func(t *testing.T) {
		b.t = t
		other, n := startOnline(t, s, "dev2", "--group", "ml")
		b.open("/ui/nodes")
		eval[chromedp.Void](b, `window.__sameDocument = true`)
		other.signal(syscall.SIGKILL)
		sel := fmt.Sprintf(`tr[data-node=%q] [data-status]`, n.ID)
		waitFor(t, 20*time.Second, "dev2 offline on the page", func() (bool, string) {
			got := b.text(sel)
			return got == api.StatusOffline, got
		})
		same := eval[bool](b, `window.__sameDocument === true`)
		if !same {
			t.Error("the page reloaded; a node going offline must show live")
		}
	})

	t.Run("pausing holds the table still", func(t *testing.T) {
		b.t = t
		other, n := startOnline(t, s, "dev3", "--group", "ml")
		b.open("/ui/nodes")
		sel := fmt.Sprintf(`tr[data-node=%q] [data-status]`, n.ID)
		b.run("pause", chromedp.Click(chromedp.CSS("#live")))
		other.signal(syscall.SIGKILL)
		waitStatus(t, s, "dev3", api.StatusOffline, 20*time.Second)
		waitFor(t, 10*time.Second, "the paused page to count the news", func() (bool, string) {
			label := b.text("#live")
			return strings.Contains(label, "new"), label
		})
		if got := b.text(sel); got != api.StatusOnline {
			t.Errorf("while paused the table changed to %q; want it to hold still", got)
		}
		b.screenshot("17-paused")
		b.run("resume", chromedp.Click(chromedp.CSS("#live")))
		if got := b.text(sel); got == api.StatusOnline {
			t.Errorf("after resuming the node still shows %q; the news held back must apply at once", got)
		}
		waitFor(t, 5*time.Second, "dev3 offline after resuming", func() (bool, string) {
			got := b.text(sel)
			return got == api.StatusOffline, got
		})
	})

	t.Run("an SSE drop and reconnect loses no event", func(t *testing.T) {
		b.t = t
		su := createSuite(t, s, api.SuiteSpec{Name: "ui-resume", Group: "ml", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
		b.open("/ui/suites/" + su.ID)
		var tasks []api.TaskSpec
		for range 24 {
			tasks = append(tasks, sh("sleep 0.2"))
		}
		submit(t, s, su.ID, tasks)
		waitFor(t, 20*time.Second, "the first live events", func() (bool, string) {
			n := eval[int](b, `nodemgrLive.ids.length`)
			return n > 0, fmt.Sprint(n)
		})
		eval[chromedp.Void](b, `nodemgrLive.drop()`)
		before := eval[int](b, `nodemgrLive.last`)
		// Tasks go on ending while the stream is down: the server keeps
		// those events for the stream that comes back.
		waitFor(t, 20*time.Second, "progress while the stream is down", func() (bool, string) {
			got, err := admin.Suite(ctx, su.ID)
			return err == nil && got.Counts.Finished >= 8, fmt.Sprint(got.Counts)
		})
		eval[chromedp.Void](b, `nodemgrLive.reconnect()`)
		if _, err := admin.CloseSuite(ctx, su.ID); err != nil {
			t.Fatal(err)
		}
		waitSuite(t, s, su.ID, api.SuiteComplete, 30*time.Second)
		waitFor(t, 10*time.Second, "the page to show 100% and Complete", func() (bool, string) {
			pct, st := b.text(`.progress-head [data-percent]`), b.text(`.head [data-state]`)
			return pct == "100" && st == api.SuiteComplete, pct + " " + st
		})
		ids := eval[[]int](b, `nodemgrLive.ids`)
		since := eval[int](b, `Number(document.body.dataset.since)`)
		if len(ids) == 0 || ids[0] != since+1 {
			t.Fatalf("events %v do not start right after the page's id %d", ids, since)
		}
		after := 0
		for i := 1; i < len(ids); i++ {
			if ids[i] != ids[i-1]+1 {
				t.Fatalf("event %d follows %d: events were lost across the drop (ids %v)", ids[i], ids[i-1], ids)
			}
			if ids[i] > before {
				after++
			}
		}
		if after == 0 {
			t.Errorf("no event came after the reconnect (last before the drop %d, ids %v)", before, ids)
		}
	})

	t.Run("a warning before the session ends, renewed in place", func(t *testing.T) {
		short, err := admin.CreateToken(ctx, api.CreateTokenRequest{Name: "short", TTL: "35s"})
		if err != nil {
			t.Fatal(err)
		}
		sb := newBrowser(t, s.url(), shots)
		sb.login(short.Secret)
		sb.open("/ui/suites")
		eval[chromedp.Void](sb, `window.__sameDocument = true`)
		waitFor(t, 20*time.Second, "the expiry warning", func() (bool, string) {
			return eval[bool](sb, `!document.getElementById("expiry").hidden`), "hidden"
		})
		sb.screenshot("19-expiry-warning")
		sb.run("renew with a longer token",
			chromedp.SendKeys(chromedp.CSS(`#renew input[name=token]`), s.token),
			chromedp.Click(chromedp.CSS(`#renew button`)))
		waitFor(t, 10*time.Second, "the warning to go", func() (bool, string) {
			return eval[bool](sb, `document.getElementById("expiry").hidden`), "shown"
		})
		if !eval[bool](sb, `window.__sameDocument === true`) {
			t.Error("renewing the session reloaded the page")
		}
		sb.open("/ui/suites")
		if sb.exists("#login-form") {
			t.Error("after renewing, a page sends the browser to the login")
		}
	})

	t.Run("a reader has no cancel button and a forged POST is refused", func(t *testing.T) {
		if _, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "reader", Groups: map[string]string{"ml": api.RoleRead}}); err != nil {
			t.Fatal(err)
		}
		tk, err := admin.CreateToken(ctx, api.CreateTokenRequest{User: "reader"})
		if err != nil {
			t.Fatal(err)
		}
		live := createSuite(t, s, api.SuiteSpec{Name: "ui-reader", Group: "ml", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
		submit(t, s, live.ID, []api.TaskSpec{sh("sleep 60")})
		rb := newBrowser(t, s.url(), shots)
		rb.login(tk.Secret)
		rb.open("/ui/suites/" + live.ID)
		if rb.exists("#page-error") {
			t.Fatalf("the reader cannot see suite ui-reader: %s", rb.text("#page-error"))
		}
		if rb.exists("#cancel-suite") || rb.exists("#close-suite") {
			t.Error("a reader's suite page offers Cancel or Close; the API would refuse them")
		}
		if rb.exists(`a[href="/ui/pools"]`) {
			t.Error("a reader's menu offers Pools, which only admins may see")
		}
		rb.screenshot("09-reader-suite")
		// The session cookie goes along (same origin), the CSRF token does not.
		code := eval[int](rb, fmt.Sprintf(`fetch("/ui/suites/%s/cancel", {method: "POST", credentials: "same-origin",
			body: new URLSearchParams({return: "/ui/"})}).then(r => r.status)`, live.ID))
		if code != 403 {
			t.Errorf("a POST without the CSRF token answered %d, want 403", code)
		}
		// With the token, the API decides: a reader may not cancel.
		// (fetch follows the redirect to the page, which shows the outcome.)
		page := eval[string](rb, fmt.Sprintf(`fetch("/ui/suites/%s/cancel", {method: "POST", credentials: "same-origin",
			body: new URLSearchParams({csrf: document.body.dataset.csrf, return: "/ui/suites/%s"})}).then(r => r.text())`, live.ID, live.ID))
		if !strings.Contains(page, `class="banner bad"`) || !strings.Contains(page, "Write") {
			t.Errorf("a reader's cancel with the CSRF token did not show the API's refusal (a Write role is needed); page:\n%.2000s", page)
		}
		got, err := client.New(s.addr, s.token).Suite(ctx, live.ID)
		if err != nil || got.State == api.SuiteCancelled {
			t.Errorf("the reader's forged cancels changed the suite: %q %v", got.State, err)
		}
		if _, err := admin.CancelSuite(ctx, live.ID); err != nil {
			t.Fatal(err)
		}
	})
	_ = progressed
}

// TestDashboardFollowsAContainerLog opens a node's page with a container
// running on it and follows the container's log from there: new lines
// appear without a reload.
func TestDashboardFollowsAContainerLog(t *testing.T) {
	chromiumPath(t)
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	labels, _ := json.Marshal(dockertest.Labels(t, eng)) // removes leftovers when the test ends
	shots := screenshotDir(t)
	s := startServer(t)
	_, n := startOnline(t, s, "ct-ui", "--container-host-ip", "127.0.0.1", "--container-usage-interval", "300ms")
	job := filepath.Join(t.TempDir(), "ticker.yaml")
	os.WriteFile(job, []byte(fmt.Sprintf(`name: ticker
image: %s
command: [sh, -c, "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done"]
cpus: 0.25
memory_mb: 32
labels: %s
`, image, labels)), 0o644)
	if out, stderr, code := s.run(t, "container", "deploy", "ct-ui", "-f", job, "--id", "tick1"); code != 0 {
		t.Fatalf("container deploy: exit %d\n%s%s", code, out, stderr)
	}
	b := newBrowser(t, s.url(), shots)
	b.login(s.token)
	b.open("/ui/nodes/" + n.ID)
	if !b.exists(`a[href="/ui/logs?container=tick1"]`) {
		t.Fatalf("the node page offers no log of container tick1:\n%s", b.text("main"))
	}
	b.screenshot("20-node-with-container")
	b.run("follow the log", chromedp.Click(chromedp.CSS(`a[href="/ui/logs?container=tick1"]`)), chromedp.WaitVisible(chromedp.CSS("#log")))
	eval[chromedp.Void](b, `window.__sameDocument = true`)
	first := lastTick(b.text("#log"))
	waitFor(t, 20*time.Second, "new lines in the followed log", func() (bool, string) {
		got := lastTick(b.text("#log"))
		return got >= first+5, fmt.Sprintf("tick %d (first %d)", got, first)
	})
	if !eval[bool](b, `window.__sameDocument === true`) {
		t.Error("the log page reloaded; it must follow in place")
	}
	b.screenshot("21-container-log")
}

// lastTick is the number of the last "tick N" line in a log, 0 if none.
func lastTick(log string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		var i int
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "tick %d", &i); err == nil {
			n = i
		}
	}
	return n
}
