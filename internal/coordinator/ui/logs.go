package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/nodemgr/nodemgr/api"
)

// A log is a service's (node and coordinate) or a container's (id). The
// page shows its tail and follows it: the script asks /ui/logs/more for
// what came after the cursor of the last answer, every two seconds.

type logData struct {
	What   string // "service web.api.u.c on n1", "container j-1"
	Node   string // the node it runs on, for the way back; "" if unknown
	Query  string // the log's parameters, for the script
	Text   string
	Cursor string
}

// logPath is the API path of the log a page's query names.
func logPath(q url.Values) (path, what string, err error) {
	switch {
	case q.Get("container") != "":
		id := q.Get("container")
		return "/v1/containers/" + esc(id) + "/logs", "container " + id, nil
	case q.Get("node") != "" && q.Get("service") != "":
		n, s := q.Get("node"), q.Get("service")
		return "/v1/nodes/" + esc(n) + "/services/" + esc(s) + "/logs", "service " + s + " on " + n, nil
	}
	return "", "", &apiError{Status: http.StatusBadRequest,
		Message: "name a log: ?container=ID, or ?node=NODE&service=COORDINATE"}
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
	keep := url.Values{}
	for _, k := range []string{"container", "node", "service"} {
		if q.Get(k) != "" {
			keep.Set(k, q.Get(k))
		}
	}
	d.Query = keep.Encode()
	d.Node = q.Get("node")
	if id := q.Get("container"); id != "" {
		var c api.Container
		if err := v.c.get(ctx, "/v1/containers/"+esc(id), nil, &c); err == nil {
			d.Node = c.Node
		}
	}
	a, err := v.c.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	d.Text, d.Cursor = a.body.String(), a.header.Get("Nodemgr-Log-Cursor")
	return nil
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
	aq := url.Values{}
	if a := q.Get("after"); a != "" {
		aq.Set("after", a)
	}
	a, err := c.do(r.Context(), http.MethodGet, path, aq, nil)
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
	json.NewEncoder(w).Encode(map[string]string{"text": a.body.String(), "cursor": a.header.Get("Nodemgr-Log-Cursor")})
}
