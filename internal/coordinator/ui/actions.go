package ui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// action is a button's POST: it makes one API request as the session's
// user and comes back to the page with what happened. The page asks for a
// confirmation first; the CSRF check is withSession's.
type action struct {
	path string
	do   func(ctx context.Context, r *http.Request, c caller) (string, error)
}

func (u *UI) actions() []action {
	return []action{
		{"/ui/suites/{suite}/cancel", func(ctx context.Context, r *http.Request, c caller) (string, error) {
			id := r.PathValue("suite")
			return "Suite " + id + " cancelled.", c.send(ctx, http.MethodPost, "/v1/suites/"+esc(id)+"/cancel", nil)
		}},
		{"/ui/suites/{suite}/close", func(ctx context.Context, r *http.Request, c caller) (string, error) {
			id := r.PathValue("suite")
			return "Suite " + id + " closed: it takes no new tasks and completes when its last one ends.",
				c.send(ctx, http.MethodPost, "/v1/suites/"+esc(id)+"/close", nil)
		}},
		{"/ui/tasks/{task}/cancel", func(ctx context.Context, r *http.Request, c caller) (string, error) {
			id := r.PathValue("task")
			return "Task " + id + " cancelled.", c.send(ctx, http.MethodPost, "/v1/tasks/"+esc(id)+"/cancel", nil)
		}},
		{"/ui/nodes/{node}/shutdown", shutdownNode},
		{"/ui/pools/{pool}/scale", scalePool},
		{"/ui/pools/{pool}/delete", func(ctx context.Context, r *http.Request, c caller) (string, error) {
			name := r.PathValue("pool")
			return "Pool " + name + " deleted; its machines are being destroyed.",
				c.send(ctx, http.MethodDelete, "/v1/pools/"+esc(name), nil)
		}},
		{"/ui/deployments/{deployment}/destroy", func(ctx context.Context, r *http.Request, c caller) (string, error) {
			id := r.PathValue("deployment")
			return "Deployment " + id + " is being destroyed.", c.send(ctx, http.MethodDelete, "/v1/deployments/"+esc(id), nil)
		}},
	}
}

func shutdownNode(ctx context.Context, r *http.Request, c caller) (string, error) {
	id, mode := r.PathValue("node"), r.PostFormValue("mode")
	if mode != api.ShutdownGraceful && mode != api.ShutdownForce {
		return "", &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf("mode must be graceful or force, got %q", mode)}
	}
	msg := "Node " + id + " is draining: it finishes its running work, then its agent exits."
	if mode == api.ShutdownForce {
		msg = "Node " + id + " is shutting down now; its running tasks go back to the queue."
	}
	return msg, c.send(ctx, http.MethodPost, "/v1/nodes/"+esc(id)+"/shutdown", api.ShutdownRequest{Mode: mode})
}

// scalePool sets a pool's min and max: the API replaces the whole spec, so
// the rest is read back first.
func scalePool(ctx context.Context, r *http.Request, c caller) (string, error) {
	name := r.PathValue("pool")
	lo, err1 := strconv.Atoi(strings.TrimSpace(r.PostFormValue("min")))
	hi, err2 := strconv.Atoi(strings.TrimSpace(r.PostFormValue("max")))
	if err1 != nil || err2 != nil {
		return "", &apiError{Status: http.StatusBadRequest, Message: "min and max must be whole numbers of machines"}
	}
	var p api.PoolDetail
	if err := c.get(ctx, "/v1/pools/"+esc(name), nil, &p); err != nil {
		return "", err
	}
	spec := p.Spec
	spec.Min, spec.Max = lo, hi
	return fmt.Sprintf("Pool %s now scales between %d and %d machines.", name, lo, hi),
		c.send(ctx, http.MethodPut, "/v1/pools/"+esc(name), spec)
}

// act runs an action and sends the browser back where it came from, with
// the outcome as a one-time message.
func (u *UI) act(a action) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		token, _, _ := u.sessions.read(s)
		msg, err := a.do(r.Context(), r, caller{h: u.api, token: token})
		if err != nil {
			s.setFlash(flash{Text: err.Error(), Bad: true})
		} else {
			s.setFlash(flash{Text: msg})
		}
		http.Redirect(w, r, safeReturn(r.PostFormValue("return")), http.StatusSeeOther)
	}
}
