package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/internal/errdefs"
)

// authKind says what credential a route takes.
type authKind int

const (
	authNone authKind = iota // /healthz only
	authUser                 // an API token; the principal is in the context
	authSelf                 // the handler authenticates (join token, node credential)
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
	return slices.Concat(s.coreRoutes(), s.workloadRoutes(), s.containerRoutes())
}

func (s *Server) coreRoutes() []route {
	return []route{
		{"GET", "/healthz", authNone, s.handleHealth},
		{"GET", "/metrics", authUser, s.handleMetrics},
		{"GET", "/v1/openapi.json", authUser, s.handleOpenAPI},
		{"GET", "/v1/whoami", authUser, s.handleWhoami},

		{"GET", "/v1/nodes", authUser, s.handleListNodes},
		{"GET", "/v1/nodes/{node}", authUser, s.handleGetNode},
		{"PATCH", "/v1/nodes/{node}", authUser, s.handlePatchNode},
		{"DELETE", "/v1/nodes/{node}", authUser, s.handleDeleteNode},
		{"POST", "/v1/nodes/{node}/shutdown", authUser, s.handleShutdownNode},

		{"POST", "/v1/agent/register", authSelf, s.handleRegister},
		{"GET", "/v1/agent/connect", authSelf, s.handleConnect},

		{"GET", "/v1/suites", authUser, s.handleListSuites},
		{"POST", "/v1/suites", authUser, s.handleCreateSuite},
		{"GET", "/v1/suites/{suite}", authUser, s.handleGetSuite},
		{"POST", "/v1/suites/{suite}/close", authUser, s.handleCloseSuite},
		{"POST", "/v1/suites/{suite}/cancel", authUser, s.handleCancelSuite},
		{"POST", "/v1/suites/{suite}/assign", authUser, s.handleAssignSuite},
		{"GET", "/v1/suites/{suite}/tasks", authUser, s.handleListTasks},
		{"POST", "/v1/suites/{suite}/tasks", authUser, s.handleSubmitTasks},
		{"GET", "/v1/tasks/{task}", authUser, s.handleGetTask},
		{"POST", "/v1/tasks/{task}/cancel", authUser, s.handleCancelTask},

		{"GET", "/v1/templates", authUser, s.handleListTemplates},
		{"GET", "/v1/templates/{name}", authUser, s.handleGetTemplate},
		{"PUT", "/v1/templates/{name}", authUser, s.handlePutTemplate},
		{"DELETE", "/v1/templates/{name}", authUser, s.handleDeleteTemplate},
		{"GET", "/v1/templates/{name}/render", authUser, s.handleRenderTemplate},
		{"GET", "/v1/mappings", authUser, s.handleListMappings},
		{"GET", "/v1/mappings/{name}", authUser, s.handleGetMapping},
		{"PUT", "/v1/mappings/{name}", authUser, s.handlePutMapping},
		{"DELETE", "/v1/mappings/{name}", authUser, s.handleDeleteMapping},

		{"GET", "/v1/deployments", authUser, s.handleListDeployments},
		{"POST", "/v1/deployments", authUser, s.handleProvision},
		{"GET", "/v1/deployments/{deployment}", authUser, s.handleGetDeployment},
		{"DELETE", "/v1/deployments/{deployment}", authUser, s.handleDestroyDeployment},
		{"POST", "/v1/deployments/{deployment}/lifecycle/{verb}", authUser, s.handleLifecycle},
		{"POST", "/v1/deployments/{deployment}/exec", authUser, s.handleExec},
		{"PUT", "/v1/deployments/{deployment}/files", authUser, s.handleCopyTo},
		{"GET", "/v1/deployments/{deployment}/files", authUser, s.handleCopyFrom},

		{"GET", "/v1/users", authUser, s.handleListUsers},
		{"POST", "/v1/users", authUser, s.handleCreateUser},
		{"DELETE", "/v1/users/{user}", authUser, s.handleDeleteUser},
		{"PUT", "/v1/users/{user}/groups/{group}", authUser, s.handleSetMembership},

		{"GET", "/v1/tokens", authUser, s.handleListTokens},
		{"POST", "/v1/tokens", authUser, s.handleCreateToken},
		{"DELETE", "/v1/tokens/{token}", authUser, s.handleDeleteToken},
		{"GET", "/v1/join-tokens", authUser, s.handleListJoinTokens},
		{"POST", "/v1/join-tokens", authUser, s.handleCreateJoinToken},
		{"DELETE", "/v1/join-tokens/{token}", authUser, s.handleDeleteJoinToken},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.Handle(rt.Method+" "+rt.Path, s.wrap(rt))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
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

func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request, rt route) error {
	if rt.Auth == authUser {
		p, err := s.userPrincipal(r.Context(), r)
		if err != nil {
			return err
		}
		r = r.WithContext(withPrincipal(r.Context(), p))
	}
	return rt.handler(w, r)
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
