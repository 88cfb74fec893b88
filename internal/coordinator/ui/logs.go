package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/nodemgr/nodemgr/api"
)

// A log is a service's (node and coordinate), a container's (id) or a task
// attempt's (task and attempt). The page shows its tail (a task's: from
// the start) and follows it: the script asks /ui/logs/more for what came
// after the cursor of the last answer, every two seconds, until a task's
// attempt has ended and its log is read to the end.

type logData struct {
	What     string // "service web.api.u.c on n1", "container j-1", "task k-1 attempt 2"
	Node     string // the node it runs on, for the way back; "" if unknown
	Task     string // the task it is of, for the way back; "" for others
	Query    string // the log's parameters, for the script
	Text     string
	Cursor   string
	Complete bool // nothing more will come
}

// logPath is the API path of the log a page's query names.
func logPath(q url.Values) (path, what string, err error) {
	switch {
	case q.Get("task") != "":
		id, what := q.Get("task"), "task "+q.Get("task")
		if n := q.Get("attempt"); n != "" {
			what += " attempt " + n
		}
		return "/v1/tasks/" + esc(id) + "/logs", what, nil
	case q.Get("container") != "":
		id := q.Get("container")
		return "/v1/containers/" + esc(id) + "/logs", "container " + id, nil
	case q.Get("node") != "" && q.Get("service") != "":
		n, s := q.Get("node"), q.Get("service")
		return "/v1/nodes/" + esc(n) + "/services/" + esc(s) + "/logs", "service " + s + " on " + n, nil
	}
	return "", "", &apiError{Status: http.StatusBadRequest,
		Message: "name a log: ?container=ID, ?node=NODE&service=COORDINATE, or ?task=ID[&attempt=N]"}
}

func (u *UI) logsPage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Title, v.Nav = "logs", "Log", "nodes"
	q := r.URL.Query()
	path, what, err := logPath(q)
	if err != nil {
		return err
	}
	d := &logData{What: what}
	v.Data = d
	v.Title = "Log of " + what
	keep := logQuery(q)
	d.Node, d.Task = q.Get("node"), q.Get("task")
	if d.Task != "" {
		v.Nav = "suites"
	}
	if id := q.Get("container"); id != "" {
		var c api.Container
		if err := v.c.get(ctx, "/v1/containers/"+esc(id), nil, &c); err == nil {
			d.Node = c.Node
		}
	}
	a, err := v.c.do(ctx, http.MethodGet, path, apiLogQuery(keep, ""), nil)
	if err != nil {
		return err
	}
	d.Text, d.Cursor = a.body.String(), a.header.Get(api.HeaderLogCursor)
	if d.Task != "" {
		// Follow the attempt shown, even once another starts.
		if n := a.header.Get(api.HeaderLogAttempt); n != "" && n != "0" {
			keep.Set("attempt", n)
			d.What = "task " + d.Task + " attempt " + n
			v.Title = "Log of " + d.What
		}
		d.Complete = a.header.Get(api.HeaderLogComplete) == "true"
	}
	d.Query = keep.Encode()
	return nil
}

// logQuery keeps the parameters that name a log.
func logQuery(q url.Values) url.Values {
	keep := url.Values{}
	for _, k := range []string{"container", "node", "service", "task", "attempt"} {
		if q.Get(k) != "" {
			keep.Set(k, q.Get(k))
		}
	}
	return keep
}

// apiLogQuery is the API's query for a log named by keep, from after.
func apiLogQuery(keep url.Values, after string) url.Values {
	aq := url.Values{}
	if n := keep.Get("attempt"); n != "" && keep.Get("task") != "" {
		aq.Set("attempt", n)
	}
	if after != "" {
		aq.Set("after", after)
	}
	return aq
}

// logsMore answers what a followed log gained after ?after=, as JSON
// {text, cursor}.
func (u *UI) logsMore(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	path, _, err := logPath(q)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token, _, _ := u.sessions.read(s)
	c := caller{h: u.api, token: token}
	a, err := c.do(r.Context(), http.MethodGet, path, apiLogQuery(logQuery(q), q.Get("after")), nil)
	if err != nil {
		var ae *apiError
		code := http.StatusBadGateway
		if errors.As(err, &ae) {
			code = ae.Status
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]any{"text": a.body.String(), "cursor": a.header.Get(api.HeaderLogCursor),
		"complete": a.header.Get(api.HeaderLogComplete) == "true"})
}
