package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// provisionTimeout bounds one machine's provisioning.
const provisionTimeout = 10 * time.Minute

// providers makes each provider once, with its settings.
type providers struct {
	mu       sync.Mutex
	settings map[string]map[string]string
	made     map[string]provision.Provider
}

func (p *providers) get(name string) (provision.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.made[name]; pr != nil {
		return pr, nil
	}
	pr, err := provision.New(name, p.settings[name])
	if err != nil {
		return nil, err
	}
	if p.made == nil {
		p.made = map[string]provision.Provider{}
	}
	p.made[name] = pr
	return pr, nil
}

// close closes the providers that hold connections.
func (p *providers) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, pr := range p.made {
		if c, ok := pr.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	p.made = nil
	return errors.Join(errs...)
}

func apiDeployment(d store.Deployment) api.Deployment {
	return api.Deployment{ID: d.ID, Provider: d.Provider, ResourceID: d.ResourceID, Name: d.Name, Template: d.Template,
		State: d.State, StateReason: d.StateReason, Address: d.Address, Executors: d.Executors, Extra: d.Extra,
		Labels: d.Labels, Node: d.NodeID, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

func (s *Server) handleProvision(w http.ResponseWriter, r *http.Request) error {
	// Count is read apart so that an explicit 0 is refused, not taken
	// for "one": only a request without count means one machine.
	var body struct {
		api.ProvisionRequest
		Count *int `json:"count,omitempty"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	req := body.ProvisionRequest
	req.Count = 1
	if body.Count != nil {
		req.Count = *body.Count
	}
	if req.Count < 1 || req.Count > 100 {
		return errdefs.Field("count", "must be between 1 and 100, got %d", req.Count)
	}
	if req.Template == "" {
		return errdefs.Field("template", "required (see nodemgr template ls)")
	}
	if req.Name == "" {
		req.Name = req.Template
	}
	if err := validate.Name("name", req.Name); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("provision machines"); err != nil {
		return err
	}
	pr, err := s.providers.get(req.Provider)
	if err != nil {
		return err
	}
	rendered, err := s.Render(r.Context(), req.Template, req.Provider)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	out := api.DeploymentList{Deployments: []api.Deployment{}}
	for i := range req.Count {
		id := auth.NewID("d-")
		name := req.Name
		if req.Count > 1 {
			name = fmt.Sprintf("%s-%d", req.Name, i+1)
		}
		d := store.Deployment{ID: id, Provider: req.Provider, Name: name, Template: req.Template,
			State: provision.StatePending, Extra: rendered.Extra, CreatedAt: now,
			Labels: map[string]string{"nodemgr.deployment": id, "nodemgr.template": req.Template}}
		if err := s.store.CreateDeployment(r.Context(), d); err != nil {
			return fmt.Errorf("provision %s: %w", name, err)
		}
		out.Deployments = append(out.Deployments, apiDeployment(d))
		go s.provisionOne(pr, d)
	}
	httpapi.WriteJSON(w, http.StatusAccepted, out)
	return nil
}

// provisionOne makes one machine and records the outcome. It outlives the
// request that asked for it.
func (s *Server) provisionOne(pr provision.Provider, d store.Deployment) {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	start := time.Now()
	made, err := pr.Provision(ctx, provision.Spec{Name: d.Name, Template: d.Template, Extra: d.Extra, Labels: d.Labels})
	_, uerr := s.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
		if err != nil {
			cur.State, cur.StateReason = api.DeploymentFailed, errdefs.Message(err)
			return nil
		}
		cur.State, cur.StateReason = made.State, ""
		cur.ResourceID, cur.Address, cur.Executors = made.ResourceID, made.Address, made.Executors
		if made.Extra != nil {
			cur.Extra = made.Extra // as the provider used it (local adds its warning)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("provisioning failed", "deployment", d.ID, "name", d.Name, "provider", d.Provider, "err", err)
	} else {
		s.log.Info("provisioned", "deployment", d.ID, "name", d.Name, "provider", d.Provider, "resource", made.ResourceID, "took", time.Since(start).Round(time.Millisecond))
	}
	if uerr != nil {
		s.log.Error("record provisioning outcome", "deployment", d.ID, "err", uerr)
		if err == nil {
			pr.Destroy(context.Background(), made) // untracked would mean orphaned
		}
	}
}

// resolveDeployment finds a deployment by ID, or by name among live ones.
func (s *Server) resolveDeployment(ctx context.Context, ref string) (store.Deployment, error) {
	d, err := s.store.GetDeployment(ctx, ref)
	if err == nil || !errdefs.IsNotFound(err) {
		return d, err
	}
	all, err := s.store.ListDeployments(ctx, store.DeploymentFilter{})
	if err != nil {
		return d, err
	}
	var found []store.Deployment
	for _, d := range all {
		if d.Name == ref && d.State != provision.StateTerminated {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return d, errdefs.NotFound("deployment %q (see nodemgr deployment ls)", ref)
	}
	return d, errdefs.Conflict("deployment name %q is ambiguous; use its ID", ref)
}

func (s *Server) handleListDeployments(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.DeploymentFilter{Provider: q.Get("provider")}
	if st := q.Get("state"); st != "" {
		f.States = strings.Split(st, ",")
	}
	pg, err := readPage(q, "deployments", f.Provider, q.Get("state"))
	if err != nil {
		return err
	}
	list, next, err := fillPage(pg, func(sp store.Page) ([]store.Deployment, error) {
		f.Page = sp
		return s.store.ListDeployments(r.Context(), f)
	}, store.Deployment.Cursor, nil)
	if err != nil {
		return err
	}
	out := api.DeploymentList{Deployments: make([]api.Deployment, 0, len(list)), Next: next}
	for _, d := range list {
		out.Deployments = append(out.Deployments, apiDeployment(d))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleGetDeployment(w http.ResponseWriter, r *http.Request) error {
	d, err := s.resolveDeployment(r.Context(), r.PathValue("deployment"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, apiDeployment(d))
	return nil
}

// handleDestroyDeployment removes the machine and keeps the record as
// terminated, for history.
func (s *Server) handleDestroyDeployment(w http.ResponseWriter, r *http.Request) error {
	if err := principalFrom(r.Context()).RequireAdmin("destroy machines"); err != nil {
		return err
	}
	d, err := s.resolveDeployment(r.Context(), r.PathValue("deployment"))
	if err != nil {
		return err
	}
	if d.State == provision.StatePending {
		return errdefs.Conflict("deployment %s is still being provisioned; destroy it once it is running or failed", d.Name)
	}
	if d.ResourceID != "" && d.State != provision.StateTerminated {
		pr, err := s.providers.get(d.Provider)
		if err != nil {
			return err
		}
		if err := pr.Destroy(r.Context(), d.Machine()); err != nil {
			return fmt.Errorf("destroy %s: %w", d.Name, err)
		}
		orchestrate.ForgetHost(cluster{s}, d, s.log)
	}
	d, err = s.store.UpdateDeployment(r.Context(), d.ID, func(cur *store.Deployment) error {
		cur.State, cur.StateReason = provision.StateTerminated, "destroyed by "+principalFrom(r.Context()).User
		return nil
	})
	if err != nil {
		return err
	}
	if d.NodeID != "" {
		// Its agent went with the machine: no two-minute ghost online.
		if err := s.forgetNode(r.Context(), d.NodeID, "its machine "+d.Name+" was destroyed"); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		s.wakeOrchestrator()
	}
	httpapi.WriteJSON(w, http.StatusOK, apiDeployment(d))
	return nil
}

// handleLifecycle performs start, stop, hibernate, reboot or terminate;
// a verb the provider cannot do is refused before anything is touched.
func (s *Server) handleLifecycle(w http.ResponseWriter, r *http.Request) error {
	verb := r.PathValue("verb")
	if !slices.Contains(provision.Verbs, verb) {
		return errdefs.Field("verb", "unknown lifecycle verb %q; use one of %v", verb, provision.Verbs)
	}
	if err := principalFrom(r.Context()).RequireAdmin(verb + " machines"); err != nil {
		return err
	}
	d, err := s.resolveDeployment(r.Context(), r.PathValue("deployment"))
	if err != nil {
		return err
	}
	if d.ResourceID == "" || d.State == provision.StateTerminated || d.State == api.DeploymentFailed {
		return errdefs.Conflict("deployment %s is %s; there is no machine to %s", d.Name, d.State, verb)
	}
	pr, err := s.providers.get(d.Provider)
	if err != nil {
		return err
	}
	if err := provision.Do(r.Context(), pr, verb, d.Machine()); err != nil {
		return fmt.Errorf("%s %s: %w", verb, d.Name, err)
	}
	state, reason, err := observedState(r.Context(), pr.(provision.Lifecycle), d.Machine())
	if err != nil {
		return err
	}
	d, err = s.store.UpdateDeployment(r.Context(), d.ID, func(cur *store.Deployment) error {
		cur.State, cur.StateReason = state, reason
		return nil
	})
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, apiDeployment(d))
	return nil
}

// driftLoop compares tracked deployments with what their providers report,
// so a machine removed or stopped behind nodemgr's back is recorded as such
// rather than silently forgotten. Deployments left pending by a server that
// stopped mid-provisioning are marked failed.
func (s *Server) driftLoop(ctx context.Context) {
	s.failInterrupted(ctx)
	t := time.NewTicker(s.cfg.DriftInterval)
	defer t.Stop()
	for {
		s.checkDrift(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) failInterrupted(ctx context.Context) {
	pending, err := s.store.ListDeployments(ctx, store.DeploymentFilter{States: []string{provision.StatePending}})
	if err != nil {
		return
	}
	for _, d := range pending {
		if d.ResourceID != "" {
			continue // the drift check asks its provider
		}
		if !d.CreatedAt.Before(s.started) {
			// This process may be provisioning it now: the loop starts
			// again with each term of leadership, not only at start.
			continue
		}
		s.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
			cur.State, cur.StateReason = api.DeploymentFailed, "the server stopped while provisioning it; destroy and provision again"
			return nil
		})
	}
}

// observedState asks a provider for a machine's state, and the reason for
// it where the provider can say (provision.StateReasoner).
func observedState(ctx context.Context, lc provision.Lifecycle, d provision.Deployment) (state, reason string, err error) {
	if sr, ok := lc.(provision.StateReasoner); ok {
		return sr.StateReason(ctx, d)
	}
	state, err = lc.State(ctx, d)
	return state, "", err
}

func (s *Server) checkDrift(ctx context.Context) {
	list, err := s.store.ListDeployments(ctx, store.DeploymentFilter{})
	if err != nil {
		return
	}
	for _, d := range list {
		if d.ResourceID == "" || d.State == provision.StateTerminated || d.State == api.DeploymentFailed {
			continue
		}
		pr, err := s.providers.get(d.Provider)
		if err != nil {
			continue
		}
		lc, ok := pr.(provision.Lifecycle)
		if !ok {
			continue
		}
		state, reason, err := observedState(ctx, lc, d.Machine())
		if err != nil || state == d.State {
			continue
		}
		switch {
		case reason != "":
			// The provider knows why (a spot instance taken back).
		case state == provision.StateTerminated:
			reason = "removed outside nodemgr: drifted"
		default:
			reason = "changed outside nodemgr (was " + d.State + ")"
		}
		s.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
			cur.State, cur.StateReason = state, reason
			return nil
		})
		s.log.Warn("deployment drifted", "deployment", d.ID, "name", d.Name, "was", d.State, "now", state)
	}
}
