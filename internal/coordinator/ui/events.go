package ui

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// events is the tab's Server-Sent Events stream. It starts after the
// Last-Event-ID the browser sends when it reconnects, or after ?since= (the
// id the page was rendered at); events the ring no longer holds are
// answered with a "reset" event, which makes the page reload rather than
// show a state with a hole in it.
func (u *UI) events(w http.ResponseWriter, r *http.Request) {
	s := u.session(r)
	if s == nil {
		http.Error(w, "not logged in, or the session expired: log in again at /ui/login", http.StatusUnauthorized)
		return
	}
	token, _, expires := u.sessions.read(s)
	// Checking the token through the API also marks this connection as an
	// authenticated client's for the server's connection guard.
	if _, err := u.whoami(r.Context(), token); err != nil {
		http.Error(w, "the session's token no longer works: "+err.Error()+"; log in again", http.StatusUnauthorized)
		return
	}
	last, err := startID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	unwatch, ok := s.feed.watch()
	if !ok {
		http.Error(w, fmt.Sprintf("this session has %d live streams open already: close some of its tabs", maxWatchers), http.StatusTooManyRequests)
		return
	}
	defer unwatch()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	beat := time.NewTicker(u.cfg.Heartbeat)
	defer beat.Stop()
	end := time.NewTimer(time.Until(expires))
	defer end.Stop()
	for {
		evs, lost, more := s.feed.since(last)
		if lost {
			last = s.feed.lastID()
			writeEvent(w, event{ID: last, Type: "reset", Data: []byte(`{}`)})
		}
		for _, e := range evs {
			writeEvent(w, e)
			last = e.ID
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.feed.quit: // logged out, or the session was evicted
			writeEvent(w, event{ID: last, Type: "session", Data: []byte(`{"error":"the session ended; log in again"}`)})
			rc.Flush()
			return
		case <-end.C:
			// A renewal moves the end: go on until the new one.
			if _, _, expires := u.sessions.read(s); time.Until(expires) > 0 {
				end.Reset(time.Until(expires))
				continue
			}
			writeEvent(w, event{ID: last, Type: "session", Data: []byte(`{"error":"the session ended; log in again"}`)})
			rc.Flush()
			return
		case <-beat.C:
			// A comment: keeps proxies from closing an idle stream, and
			// lets the browser notice a dead one.
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-more:
		}
	}
}

// startID is where a stream starts: the browser's Last-Event-ID when it
// reconnects, else the page's ?since=.
func startID(r *http.Request) (uint64, error) {
	v := r.Header.Get("Last-Event-ID")
	what := "Last-Event-ID"
	if v == "" {
		v, what = r.URL.Query().Get("since"), "since"
	}
	if v == "" {
		return 0, nil
	}
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s must be an event id (a whole number), got %q; reload the page", what, v)
	}
	return id, nil
}

func writeEvent(w http.ResponseWriter, e event) {
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, e.Data)
}
