package agent

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/node/artifact"
)

// The local API is nodee's REST API: status, artifacts and services of this
// node. It listens on a unix socket only the agent's user may open and, when
// configured, on TCP behind a token. The server reaches the same handler
// through the agent's session (MethodLocalAPI), so there is one
// implementation whichever way a request comes.

// maxLocalBody caps local API request bodies.
const maxLocalBody = 1 << 20

// maxLogTail caps how much log one request returns.
const maxLogTail = 4 << 20

// maxLogFollow caps what one request for the rest of a log returns, under
// what a relayed answer carries (maxForwardedBody), so that none is cut.
const maxLogFollow = 512 << 10

// localRoute is one local API endpoint.
type localRoute struct {
	Method, Path string
	handler      func(w http.ResponseWriter, r *http.Request) error
}

func (a *Agent) localRoutes() []localRoute {
	return []localRoute{
		{"GET", "/v1/status", a.handleLocalStatus},
		{"GET", "/v1/artifacts", a.handleListArtifacts},
		{"POST", "/v1/artifacts", jsonCall(a.installArtifact)},
		{"GET", "/v1/artifacts/{id}", jsonAnswer(a.getArtifact)},
		{"DELETE", "/v1/artifacts/{id}", a.handleRemoveArtifact},
		{"GET", "/v1/services", a.handleListServices},
		{"POST", "/v1/services", jsonCall(a.startService)},
		{"GET", "/v1/services/{coordinate}", jsonAnswer(a.getService)},
		{"DELETE", "/v1/services/{coordinate}", a.handleRemoveService},
		{"POST", "/v1/services/{coordinate}/{action}", a.handleServiceAction},
		{"GET", "/v1/services/{coordinate}/logs", a.handleServiceLogs},
		{"GET", "/v1/containers", a.handleListContainers},
		{"POST", "/v1/containers", jsonCall(a.deployContainer)},
		{"GET", "/v1/containers/{id}", jsonAnswer(a.getContainer)},
		{"DELETE", "/v1/containers/{id}", jsonAnswer(a.deleteContainer)},
		{"GET", "/v1/containers/{id}/logs", a.handleContainerLogs},
		{"GET", "/v1/resources", jsonAnswer(a.resources)},
		{"POST", "/v1/onboard", jsonCall(a.onboard)},
		{"POST", "/v1/offboard", a.handleOffboard},
		{"POST", "/v1/commitments", jsonCall(a.commit)},
		{"DELETE", "/v1/commitments/{id}", a.handleRelease},
		{"GET", "/v1/allocations", a.handleListAllocations},
		{"GET", "/v1/allocations/{id}", jsonAnswer(a.allocation)},
		{"POST", "/v1/allocations/{id}/{action}", a.handleAllocationAction},
		{"GET", "/v1/allocations/{id}/logs", a.handleAllocationLogs},
		{"GET", "/v1/tasks/{task}/log", a.handleTaskLog},
		{"GET", "/v1/overlay", jsonAnswer(a.overlayDevice)},
	}
}

// localHandler serves the local API without authentication: callers reach
// it through the 0600 socket, the server session, or the token check.
func (a *Agent) localHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range a.localRoutes() {
		mux.HandleFunc(rt.Method+" "+rt.Path, func(w http.ResponseWriter, r *http.Request) {
			if err := rt.handler(w, r); err != nil {
				if httpapi.WriteError(w, err) == http.StatusInternalServerError {
					a.log.Error("local api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
				}
			}
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, errdefs.NotFound("no local API endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// jsonAnswer is a handler that answers, as JSON, what get returns.
func jsonAnswer[T any](get func(r *http.Request) (T, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		v, err := get(r)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, v)
		return nil
	}
}

// jsonCall is jsonAnswer for a request with a JSON body, which do gets
// decoded.
func jsonCall[In, Out any](do func(r *http.Request, in In) (Out, error)) func(http.ResponseWriter, *http.Request) error {
	return jsonAnswer(func(r *http.Request) (Out, error) {
		var in In
		if err := httpapi.Decode(r, &in, maxLocalBody); err != nil {
			var none Out
			return none, err
		}
		return do(r, in)
	})
}

// requireToken guards the TCP listener.
func requireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := auth.Bearer(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			httpapi.WriteError(w, fmt.Errorf("the agent's TCP local API needs its token (local_api_token) as \"Authorization: Bearer <token>\": %w", errdefs.ErrUnauthenticated))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveLocalAPI listens on the unix socket (and TCP when configured) until
// ctx ends.
func (a *Agent) serveLocalAPI(ctx context.Context) error {
	h := a.local
	ln, err := listenUnix(a.cfg.LocalAPISocket)
	if err != nil {
		return err
	}
	listeners := []net.Listener{ln}
	handlers := []http.Handler{h}
	if a.cfg.LocalAPIListen != "" {
		tl, err := net.Listen("tcp", a.cfg.LocalAPIListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("local API: listen on %s: %w (choose another local_api_listen)", a.cfg.LocalAPIListen, err)
		}
		listeners = append(listeners, a.localTLS.listener(tl))
		handlers = append(handlers, requireToken(a.cfg.LocalAPIToken, h))
		if t := a.localTLS; t != nil {
			a.log.Info("the local API on TCP speaks HTTPS with this agent's own CA: clients pin its fingerprint or pass its certificate (curl --cacert)",
				"addr", tl.Addr().String(), "ca", t.caFile, "fingerprint", t.fingerprint)
		}
	}
	errc := make(chan error, len(listeners))
	var servers []*http.Server
	for i, l := range listeners {
		srv := &http.Server{Handler: handlers[i], ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		a.log.Info("local API listening", "addr", l.Addr().String())
		go func() { errc <- srv.Serve(l) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	for _, srv := range servers {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		srv.Shutdown(sctx)
		cancel()
	}
	os.Remove(a.cfg.LocalAPISocket)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// listenUnix listens on path with mode 0600, replacing a stale socket left
// by a crashed agent (the data dir lock says no live agent owns it). The
// socket is born with the umask's mode, which cannot be wider than what
// connect needs only if the umask allows group or other writes; the chmod
// right after closes that gap, and the data dir itself is 0700.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("local API: %s exists and is not a socket; move it away or set local_api_socket", path)
		}
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("local API: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("local API: %w", err)
	}
	return ln, nil
}

// serveForwarded answers a local API request the server sent over the
// session.
func (a *Agent) serveForwarded(ctx context.Context, req api.LocalRequest) (api.LocalResponse, error) {
	if !strings.HasPrefix(req.Path, "/v1/") {
		return api.LocalResponse{}, errdefs.Field("path", "must start with /v1/, got %q", req.Path)
	}
	target := req.Path
	if req.Query != "" {
		target += "?" + req.Query
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, target, bytes.NewReader(req.Body))
	if err != nil {
		return api.LocalResponse{}, errdefs.Field("path", "%v", err)
	}
	if len(req.Body) > 0 {
		hr.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	a.local.ServeHTTP(rec, hr)
	resp := api.LocalResponse{Status: rec.status, ContentType: rec.header.Get("Content-Type"), Body: rec.body.Bytes()}
	for k, v := range rec.header {
		if strings.HasPrefix(k, api.HeaderPrefix) && len(v) > 0 {
			if resp.Headers == nil {
				resp.Headers = map[string]string{}
			}
			resp.Headers[k] = v[0]
		}
	}
	if len(resp.Body) > maxForwardedBody {
		if !strings.HasPrefix(resp.ContentType, "text/plain") {
			return api.LocalResponse{}, fmt.Errorf("the answer to %s %s is %d bytes, more than one session frame carries; ask the agent's local API directly: %w",
				req.Method, req.Path, len(resp.Body), errdefs.ErrUnavailable)
		}
		resp.Body = resp.Body[len(resp.Body)-maxForwardedBody:] // logs: keep the end
	}
	return resp, nil
}

// maxForwardedBody keeps an answer carried over the session, base64 and
// all, under the server's 1 MiB frame limit.
const maxForwardedBody = 640 << 10

// recorder is an http.ResponseWriter that keeps the answer in memory.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (a *Agent) handleLocalStatus(w http.ResponseWriter, r *http.Request) error {
	state, suite := a.work()
	httpapi.WriteJSON(w, http.StatusOK, api.AgentStatus{
		NodeID: a.NodeID(), Name: a.cfg.Name, Server: a.currentServer(), Connected: a.peer.Load() != nil,
		State: state, SuiteID: suite, Hardware: a.hardware, Presence: a.wl.currentPresence(),
		Version: a.cfg.Version,
	})
	return nil
}

func (a *Agent) handleListArtifacts(w http.ResponseWriter, r *http.Request) error {
	inst, err := a.wl.artifacts.List()
	if err != nil {
		return fmt.Errorf("list artifacts: %w", err)
	}
	out := api.ArtifactList{Artifacts: make([]api.Artifact, 0, len(inst))}
	for _, i := range inst {
		out.Artifacts = append(out.Artifacts, a.wl.artifactInfo(i))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// currentServer is the replica the agent talks to, "" standalone.
func (a *Agent) currentServer() string {
	if a.cfg.Standalone {
		return ""
	}
	return a.server()
}

func (a *Agent) installArtifact(r *http.Request, req api.ArtifactInstall) (api.Artifact, error) {
	id, err := artifact.ParseID(req.ID)
	if err != nil {
		return api.Artifact{}, errdefs.Field("id", "%v", errdefs.Message(err))
	}
	inst, err := a.wl.artifacts.Install(r.Context(), id)
	if err != nil {
		return api.Artifact{}, err
	}
	a.wl.artifactsChanged()
	return a.wl.artifactInfo(inst), nil
}

func (a *Agent) artifactID(r *http.Request) (artifact.ID, error) {
	id, err := artifact.ParseID(r.PathValue("id"))
	if err != nil {
		return artifact.ID{}, errdefs.Field("id", "%v", errdefs.Message(err))
	}
	return id, nil
}

func (a *Agent) getArtifact(r *http.Request) (api.Artifact, error) {
	id, err := a.artifactID(r)
	if err != nil {
		return api.Artifact{}, err
	}
	inst, err := a.wl.artifacts.Get(id)
	if err != nil {
		return api.Artifact{}, err
	}
	return a.wl.artifactInfo(inst), nil
}

func (a *Agent) handleRemoveArtifact(w http.ResponseWriter, r *http.Request) error {
	id, err := a.artifactID(r)
	if err != nil {
		return err
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		return err
	}
	if force {
		_, err = a.wl.artifacts.ForceRemove(id)
	} else {
		err = a.wl.artifacts.Remove(id)
	}
	if err != nil {
		return err
	}
	a.wl.artifactsChanged()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *Agent) handleListServices(w http.ResponseWriter, r *http.Request) error {
	svcs := a.wl.services.List()
	if svcs == nil {
		svcs = []api.Service{}
	}
	httpapi.WriteJSON(w, http.StatusOK, api.ServiceList{Services: svcs})
	return nil
}

func (a *Agent) startService(r *http.Request, spec api.ServiceSpec) (api.Service, error) {
	return a.wl.startService(r.Context(), withNamesServer(spec, a.overlayNamesAddr()))
}

// withNamesServer tells a service where the overlay's names are answered
// (NODEMGR_DNS, ip:53): a process uses the node's resolver, which does not
// know them. The spec's own value wins.
func withNamesServer(spec api.ServiceSpec, dns string) api.ServiceSpec {
	if dns == "" {
		return spec
	}
	if _, set := spec.Env["NODEMGR_DNS"]; set {
		return spec
	}
	env := make(map[string]string, len(spec.Env)+1)
	for k, v := range spec.Env {
		env[k] = v
	}
	env["NODEMGR_DNS"] = dns
	spec.Env = env
	return spec
}

func (a *Agent) getService(r *http.Request) (api.Service, error) {
	return a.wl.services.Get(r.PathValue("coordinate"))
}

func (a *Agent) handleRemoveService(w http.ResponseWriter, r *http.Request) error {
	purge, err := boolQuery(r, "purge")
	if err != nil {
		return err
	}
	if err := a.wl.services.Remove(r.PathValue("coordinate"), purge); err != nil {
		return err
	}
	a.wl.unbook(api.AllocationService, r.PathValue("coordinate"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *Agent) handleServiceAction(w http.ResponseWriter, r *http.Request) error {
	coord := r.PathValue("coordinate")
	var (
		svc api.Service
		err error
	)
	switch action := r.PathValue("action"); action {
	case "stop":
		svc, err = a.wl.services.Stop(r.Context(), coord)
		a.wl.unbook(api.AllocationService, coord)
	case "drain":
		svc, err = a.wl.services.Drain(r.Context(), coord)
		a.wl.unbook(api.AllocationService, coord)
	case "restart":
		svc, err = a.wl.restartService(r.Context(), coord)
	default:
		return errdefs.NotFound("no service action %q: use stop, drain or restart", action)
	}
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, svc)
	return nil
}

func (a *Agent) handleServiceLogs(w http.ResponseWriter, r *http.Request) error {
	tail := int64(64 << 10)
	if v := r.URL.Query().Get("tail"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return errdefs.Field("tail", "must be a number of bytes >= 0, got %q", v)
		}
		tail = min(n, maxLogTail)
	}
	// after: what follows that cursor (a byte offset here), a piece small
	// enough to cross the session whole.
	from, n := int64(-1), tail
	if v := r.URL.Query().Get("after"); v != "" {
		off, err := strconv.ParseInt(v, 10, 64)
		if err != nil || off < 0 {
			return errdefs.Field("after", "must be the %s of an earlier answer, got %q", api.HeaderLogCursor, v)
		}
		from, n = off, maxLogFollow
	}
	b, end, err := a.wl.services.ReadLog(r.PathValue("coordinate"), from, n)
	if err != nil {
		return err
	}
	w.Header().Set(api.HeaderLogCursor, strconv.FormatInt(end, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, bytes.NewReader(b))
	return err
}

func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Field(name, "must be true or false, got %q", v)
	}
	return b, nil
}

// handleListContainers answers the server's list shape in one page: one
// machine's jobs are few.
func (a *Agent) handleListContainers(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteJSON(w, http.StatusOK, api.ContainerList{Containers: a.wl.containers.List()})
	return nil
}

func (a *Agent) deployContainer(r *http.Request, job api.ContainerJob) (api.Container, error) {
	return a.wl.deployContainer(r.Context(), job)
}

func (a *Agent) getContainer(r *http.Request) (api.Container, error) {
	return a.wl.containers.Get(r.PathValue("id"))
}

func (a *Agent) deleteContainer(r *http.Request) (api.Container, error) {
	c, err := a.wl.containers.Delete(r.Context(), r.PathValue("id"))
	if err != nil {
		return api.Container{}, err
	}
	a.wl.unbook(api.AllocationContainer, c.Job.ID)
	return c, nil
}

func (a *Agent) handleContainerLogs(w http.ResponseWriter, r *http.Request) error {
	tail := 0
	if v := r.URL.Query().Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errdefs.Field("tail", "must be a number of lines >= 0, got %q", v)
		}
		tail = n
	}
	// after: what came after that cursor (the time of a line here), a
	// piece small enough to cross the session whole.
	b, cursor, err := a.wl.containers.ReadLog(r.Context(), r.PathValue("id"), tail, r.URL.Query().Get("after"))
	if err != nil {
		return err
	}
	if len(b) > maxLogTail {
		b = b[len(b)-maxLogTail:]
	}
	w.Header().Set(api.HeaderLogCursor, cursor)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err
}
