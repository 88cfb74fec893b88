package server

import (
	"net/http"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/catalog"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Deployments are the machines providers made by hand (provision) and
// for pools; the catalog makes and keeps them, the handlers here decode,
// authorize and answer.

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
	made, err := s.catalog.Provision(r.Context(), req)
	return answer(w, http.StatusAccepted, api.DeploymentList{Deployments: made}, err)
}

func (s *Server) handleListDeployments(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.DeploymentFilter{Provider: q.Get("provider")}
	if st := q.Get("state"); st != "" {
		f.States = strings.Split(strings.ToLower(st), ",") // its states are lower case; people type any
	}
	pg, err := paging.Read(q, "deployments", f.Provider, q.Get("state"))
	if err != nil {
		return err
	}
	list, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Deployment, error) {
		f.Page = sp
		return s.store.ListDeployments(r.Context(), f)
	}, store.Deployment.Cursor, nil)
	if err != nil {
		return err
	}
	out := api.DeploymentList{Deployments: make([]api.Deployment, 0, len(list)), Next: next}
	for _, d := range list {
		out.Deployments = append(out.Deployments, catalog.APIDeployment(d))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleGetDeployment(w http.ResponseWriter, r *http.Request) error {
	d, err := s.catalog.ResolveDeployment(r.Context(), r.PathValue("deployment"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, catalog.APIDeployment(d))
	return nil
}

// handleDestroyDeployment removes the machine and keeps the record as
// terminated, for history; the machine's host key and its node go too.
func (s *Server) handleDestroyDeployment(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	if err := p.RequireAdmin("destroy machines"); err != nil {
		return err
	}
	d, err := s.catalog.ResolveDeployment(r.Context(), r.PathValue("deployment"))
	if err != nil {
		return err
	}
	hadMachine := d.ResourceID != "" && d.State != provision.StateTerminated
	if d, err = s.catalog.Destroy(r.Context(), d, p.User); err != nil {
		return err
	}
	if hadMachine {
		orchestrate.ForgetHost(s.catalog, d, s.log)
	}
	if d.NodeID != "" {
		// Its agent went with the machine: no two-minute ghost online.
		if err := s.hub.Forget(r.Context(), d.NodeID, "its machine "+d.Name+" was destroyed"); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		s.hub.WakeOrchestrator()
	}
	httpapi.WriteJSON(w, http.StatusOK, catalog.APIDeployment(d))
	return nil
}

// handleLifecycle performs start, stop, hibernate, reboot or terminate;
// a verb the provider cannot do is refused before anything is touched.
func (s *Server) handleLifecycle(w http.ResponseWriter, r *http.Request) error {
	verb := r.PathValue("verb")
	if err := catalog.CheckVerb(verb); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin(verb + " machines"); err != nil {
		return err
	}
	d, err := s.catalog.ResolveDeployment(r.Context(), r.PathValue("deployment"))
	if err != nil {
		return err
	}
	if d, err = s.catalog.Lifecycle(r.Context(), d, verb); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, catalog.APIDeployment(d))
	return nil
}
