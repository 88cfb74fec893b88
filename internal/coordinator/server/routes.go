package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// authKind says what credential a route takes.
type authKind int

const (
	authNone  authKind = iota // /healthz only
	authUser                  // an API token; the principal is in the context
	authAdmin                 // an admin's API token: machines, templates, mappings, users, metrics
	authSelf                  // the handler authenticates (join token, node credential)
)

// route is one API endpoint. The table below is the single source for the
// mux and for the test that keeps the OpenAPI document true.
type route struct {
	Method  string
	Path    string
	Auth    authKind
	handler func(w http.ResponseWriter, r *http.Request) error
}

func (s *Server) routeTable() []route {
	return slices.Concat(s.coreRoutes(), s.documentRoutes("/v1/templates", store.KindTemplate),
		s.documentRoutes("/v1/mappings", store.KindMapping), s.workloadRoutes(), s.containerRoutes(), s.ensembleRoutes())
}

// withKind is f's handler for one kind (of token, of document).
func withKind(f func(http.ResponseWriter, *http.Request, string) error, kind string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error { return f(w, r, kind) }
}

func (s *Server) coreRoutes() []route {
	return []route{
		{"GET", "/healthz", authNone, s.handleHealth},
		{"GET", metricsPath, authAdmin, s.handleMetrics},
		{"GET", "/v1/openapi.json", authUser, s.handleOpenAPI},
		{"GET", "/v1/whoami", authUser, s.handleWhoami},
		{"GET", "/v1/summary", authAdmin, s.handleSummary},

		{"GET", "/v1/nodes", authUser, s.handleListNodes},
		{"GET", "/v1/nodes/{node}", authUser, s.handleGetNode},
		{"PATCH", "/v1/nodes/{node}", authUser, s.handlePatchNode},
		{"DELETE", "/v1/nodes/{node}", authUser, s.handleDeleteNode},
		{"POST", "/v1/nodes/{node}/shutdown", authUser, s.handleShutdownNode},
		{"GET", "/v1/nodes/{node}/usage", authUser, s.handleNodeUsage},
		{"GET", "/v1/network", authUser, s.handleListNetwork},

		{"POST", "/v1/agent/register", authSelf, s.handleRegister},
		{"GET", "/v1/agent/connect", authSelf, s.handleConnect},
		{"GET", orchestrate.AgentBinaryPath, authSelf, s.handleAgentBinary},

		{"GET", "/v1/suites", authUser, s.handleListSuites},
		{"POST", "/v1/suites", authUser, s.handleCreateSuite},
		{"GET", "/v1/suites/{suite}", authUser, s.handleGetSuite},
		{"POST", "/v1/suites/{suite}/close", authUser, s.handleCloseSuite},
		{"POST", "/v1/suites/{suite}/cancel", authUser, s.handleCancelSuite},
		{"POST", "/v1/suites/{suite}/assign", authUser, s.handleAssignSuite},
		{"GET", "/v1/suites/{suite}/tasks", authUser, s.handleListTasks},
		{"POST", "/v1/suites/{suite}/tasks", authUser, s.handleSubmitTasks},
		{"GET", "/v1/tasks/{task}", authUser, s.handleGetTask},
		{"GET", "/v1/tasks/{task}/outputs/{path...}", authUser, s.handleGetTaskOutput},
		{"GET", "/v1/tasks/{task}/logs", authUser, s.handleTaskLogs},
		{"HEAD", "/v1/blobs/{digest}", authSelf, s.handleHeadBlob},
		{"PUT", "/v1/blobs/{digest}", authSelf, s.handlePutBlob},
		{"GET", "/v1/blobs/{digest}", authSelf, s.handleGetBlob},
		{"POST", "/v1/tasks/{task}/cancel", authUser, s.handleCancelTask},
		{"DELETE", "/v1/action-cache", authUser, s.handleClearActionCache},
		{"DELETE", "/v1/groups/{group}/action-cache", authUser, s.handleClearActionCache},

		{"GET", "/v1/templates/{name}/render", authAdmin, s.handleRenderTemplate},

		{"GET", "/v1/deployments", authAdmin, s.handleListDeployments},
		{"POST", "/v1/deployments", authAdmin, s.handleProvision},
		{"GET", "/v1/deployments/{deployment}", authAdmin, s.handleGetDeployment},
		{"DELETE", "/v1/deployments/{deployment}", authAdmin, s.handleDestroyDeployment},
		{"POST", "/v1/deployments/{deployment}/lifecycle/{verb}", authAdmin, s.handleLifecycle},

		{"GET", "/v1/pools", authAdmin, s.handleListPools},
		{"GET", "/v1/pools/{pool}", authAdmin, s.handleGetPool},
		{"PUT", "/v1/pools/{pool}", authAdmin, s.handlePutPool},
		{"PATCH", "/v1/pools/{pool}", authAdmin, s.handlePatchPool},
		{"DELETE", "/v1/pools/{pool}", authAdmin, s.handleDeletePool},
		{"GET", "/v1/pools/{pool}/events", authAdmin, s.handlePoolEvents},
		{"POST", "/v1/schedule/explain", authAdmin, s.handleScheduleExplain},
		{"POST", "/v1/deployments/{deployment}/exec", authAdmin, s.handleExec},
		{"PUT", "/v1/deployments/{deployment}/files", authAdmin, s.handleCopyTo},
		{"GET", "/v1/deployments/{deployment}/files", authAdmin, s.handleCopyFrom},

		{"GET", "/v1/users", authAdmin, s.handleListUsers},
		{"POST", "/v1/users", authAdmin, s.handleCreateUser},
		{"DELETE", "/v1/users/{user}", authAdmin, s.handleDeleteUser},
		{"PUT", "/v1/users/{user}/groups/{group}", authUser, s.handleSetMembership},

		{"GET", "/v1/tokens", authUser, withKind(s.listTokens, api.TokenAPI)},
		{"POST", "/v1/tokens", authUser, s.handleCreateToken},
		{"DELETE", "/v1/tokens/{token}", authUser, withKind(s.deleteToken, api.TokenAPI)},
		{"POST", "/v1/tokens/{token}/rotate", authUser, s.handleRotateToken},
		{"GET", "/v1/join-tokens", authUser, withKind(s.listTokens, api.TokenJoin)},
		{"POST", "/v1/join-tokens", authUser, s.handleCreateJoinToken},
		{"DELETE", "/v1/join-tokens/{token}", authUser, withKind(s.deleteToken, api.TokenJoin)},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// paths knows every route by path alone, to tell a wrong method (405)
	// from a path that does not exist (404): the catch-all below would
	// otherwise take both.
	paths := http.NewServeMux()
	methods := map[string][]string{}
	for _, rt := range s.routeTable() {
		mux.Handle(rt.Method+" "+rt.Path, s.wrap(rt))
		if methods[rt.Path] == nil {
			paths.Handle(rt.Path, http.NotFoundHandler())
		}
		methods[rt.Path] = append(methods[rt.Path], rt.Method)
	}
	// The dashboard authenticates with its own session cookie and calls
	// the routes above in-process with the session's token (package ui).
	mux.Handle("/ui/", s.dashboard)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := paths.Handler(r); pattern != "" {
			allow := strings.Join(methods[pattern], ", ")
			w.Header().Set("Allow", allow)
			s.writeError(w, r, fmt.Errorf("%s %s: this endpoint takes %s: %w", r.Method, r.URL.Path, allow, errdefs.ErrMethodNotAllowed))
			return
		}
		s.writeError(w, r, notFoundRoute(r))
	})
	return mux
}

// wrap adds authentication, error writing and metrics to a route.
func (s *Server) wrap(rt route) http.Handler {
	label := rt.Method + " " + rt.Path
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		err := s.serveRoute(sw, r, rt)
		if err != nil && clientGone(r, err) {
			// Nobody is left to read an answer, and the failure is not the
			// server's: drop the connection as net/http does, and count the
			// request as nginx's 499 (client closed request), not a 5xx.
			s.metrics.observe(label, "499", time.Since(start))
			panic(http.ErrAbortHandler)
		}
		if err != nil {
			s.writeError(sw, r, err)
		}
		s.metrics.observe(label, strconv.Itoa(sw.code), time.Since(start))
	})
}

// clientGone reports whether err is the request's own cancellation: the
// client hung up.
func clientGone(r *http.Request, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(r.Context().Err(), context.Canceled)
}

// bodyReadTimeout bounds how long a request may take to send its body, on
// every route but the agent WebSocket and file uploads, which stream.
const bodyReadTimeout = 2 * time.Minute

func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request, rt route) error {
	if r.Body != http.NoBody && !streamsBody(rt) {
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
	}
	if !holdsSession(rt) {
		r = r.WithContext(store.WithBound(r.Context(), s.cfg.StoreTimeout))
	}
	if rt.Auth == authUser || rt.Auth == authAdmin {
		p, err := s.userPrincipal(r.Context(), r)
		if rt.Path == metricsPath {
			// A scraper is let in on its last good check while the store
			// does not answer, to read the figures kept (metrics.go).
			r, p, err = s.scrapers.check(r, p, err)
		}
		if err != nil {
			return err
		}
		if rt.Auth == authAdmin {
			if err := p.RequireAdmin(rt.Method + " " + rt.Path); err != nil {
				return err
			}
		}
		r = r.WithContext(withPrincipal(r.Context(), p))
	}
	return rt.handler(w, r)
}

// holdsSession reports whether a route's request lasts as long as an
// agent's session, whose store calls are not an API request's: the store
// bound (store.WithBound) is left off it.
func holdsSession(rt route) bool { return rt.Path == "/v1/agent/connect" }

func streamsBody(rt route) bool {
	return rt.Path == "/v1/agent/connect" || rt.Path == "/v1/deployments/{deployment}/files" || rt.Path == "/v1/blobs/{digest}"
}

// statusWriter remembers the status code for metrics. It passes Hijack
// through for the WebSocket upgrade.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func notFoundRoute(r *http.Request) error {
	return errdefs.NotFound("no endpoint %s %s (the API is described at GET /v1/openapi.json)", r.Method, r.URL.Path)
}
