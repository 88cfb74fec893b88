package ui

import (
	"fmt"
	"html/template"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/humansize"
	"github.com/nodemgr/nodemgr/internal/base/humantime"
)

// parsePages parses each page with the layout and the shared partials:
// every page defines "content", so each gets its own template set.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" || base == "partials" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", n)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", n, err)
		}
		pages[base] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"badge":    badge,
	"ago":      ago,
	"duration": durationMS,
	"mb":       mb,
	"bytes":    humansize.Bytes,
	"gib":      gib,
	"join":     strings.Join,
	"total":    func(c api.TaskCounts) int { return c.Total() },
	"percent":  func(s api.Suite) int { return suiteOf(s).Percent },
	"ended":    func(c api.TaskCounts) int { return c.Finished + c.Failed + c.Cancelled },
	"runNow":   func(c api.TaskCounts) int { return c.Running - c.Held },
	"sortedKV": sortedKV,
	"statuses": func() []string { return []string{api.StatusOnline, api.StatusSuspect, api.StatusOffline} },
	"suiteStates": func() []string {
		return []string{api.SuiteOpen, api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled}
	},
	"taskStates": func() []string {
		return []string{api.TaskPending, api.TaskReady, api.TaskRunning, api.TaskFinished, api.TaskFailed, api.TaskCancelled}
	},
	"live": func(state string) bool { return state == api.SuiteOpen || state == api.SuiteClosed },
	"final": func(state string) bool {
		return state == api.TaskFinished || state == api.TaskFailed || state == api.TaskCancelled
	},
	"scaling":  scaling,
	"width":    func(part, whole int) string { return fmt.Sprintf("%.2f%%", share(part, whole)) },
	"fmtFloat": func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"span":     func(d api.Duration) string { return time.Duration(d).String() },
	"short":    short,
	"value":    func(v any) string { return fmt.Sprint(v) },
	"segments": segments,
	"add":      func(a, b int) int { return a + b },
	"button":   makeButton,
	"hostAddr": hostAddr,
}

// badge is the CSS class of a status or state: green for good, amber for
// in between, red for bad, grey for ended or unknown.
func badge(s string) string {
	switch strings.ToLower(s) {
	case "open", "running", "executing", "busy":
		return "b-info"
	case "online", "finished", "ready", "idle", "complete":
		return "b-ok"
	case "suspect", "closed", "pending", "preparing", "cleanup", "starting", "launching", "bootstrapping", "draining", "stopping", "backoff", "shutting-down", "shut-down",
		"waiting", "deploying", "degraded", "creating":
		return "b-warn"
	case "offline", "failed", "dead", "cancelled", "error":
		return "b-bad"
	}
	return "b-muted"
}

// ago is how long ago t was, in a <time> element that the page's script
// keeps counting ("28s ago" does not freeze on a live page).
func ago(t any) template.HTML {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v == nil {
			return "—"
		}
		at = *v
	}
	if at.IsZero() {
		return "—"
	}
	return template.HTML(`<time datetime="` + at.UTC().Format(time.RFC3339Nano) + `" data-ago>` +
		template.HTMLEscapeString(agoText(at, time.Now())) + `</time>`)
}

// agoText is ago's text; app.js's agoText says the same.
func agoText(at, now time.Time) string {
	if now.Sub(at) >= humantime.Days {
		return at.Format("2006-01-02")
	}
	return humantime.Ago(at, now)
}

func durationMS(ms int64) string {
	if ms < 0 {
		return "—"
	}
	d := time.Duration(ms) * time.Millisecond
	if d < time.Second {
		return fmt.Sprintf("%d ms", ms)
	}
	return d.Round(100 * time.Millisecond).String()
}

func mb(n int64) string {
	if n >= 10<<10 {
		return fmt.Sprintf("%.0f GiB", float64(n)/1024)
	}
	if n >= 1<<10 {
		return fmt.Sprintf("%.1f GiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

func gib(b uint64) string { return mb(int64(b >> 20)) }

func share(part, whole int) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) * 100 / float64(whole)
}

// short cuts a long id for a table cell; the full one is in its title.
func short(s string) string {
	if len(s) > 14 {
		return s[:12] + "…"
	}
	return s
}

type kv struct{ K, V string }

func sortedKV(m any) []kv {
	var out []kv
	switch mm := m.(type) {
	case map[string]string:
		for k, v := range mm {
			out = append(out, kv{k, v})
		}
	case map[string]int:
		for k, v := range mm {
			out = append(out, kv{k, fmt.Sprint(v)})
		}
	case map[string]any:
		for k, v := range mm {
			out = append(out, kv{k, fmt.Sprint(v)})
		}
	case map[string][]string:
		for k, v := range mm {
			out = append(out, kv{k, strings.Join(v, ", ")})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].K < out[j].K })
	return out
}

// segment is one coloured part of a suite's progress bar, in percent of
// its width: an SVG rect, since the page's policy allows no inline styles.
type segment struct {
	Class string
	X, W  string
}

// segments splits a progress bar: finished, failed, cancelled, running.
func segments(c api.TaskCounts) []segment {
	total := c.Total()
	parts := []struct {
		class string
		n     int
	}{{"s-ok", c.Finished}, {"s-bad", c.Failed}, {"s-muted", c.Cancelled}, {"s-run", c.Running}}
	var out []segment
	x := 0.0
	for _, p := range parts {
		w := share(p.n, total)
		out = append(out, segment{Class: p.class, X: fmt.Sprintf("%.2f", x), W: fmt.Sprintf("%.2f", w)})
		x += w
	}
	return out
}

// button is a confirmed action's form, for the "action" partial.
type button struct {
	CSRF, Return                      string
	Action, Label, Confirm, Class, ID string
	Mode                              string
}

// makeButton builds a button: {{template "action" button $ "/ui/x" "Label" "Confirm text" "danger" "id" ""}}.
func makeButton(v *view, action, label, confirm, class, id, mode string) button {
	return button{CSRF: v.CSRF, Return: v.Return, Action: action, Label: label, Confirm: confirm, Class: class, ID: id, Mode: mode}
}
