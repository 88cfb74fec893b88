package catalog

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

func APIDeployment(d store.Deployment) api.Deployment {
	return api.Deployment{ID: d.ID, Provider: d.Provider, ResourceID: d.ResourceID, Name: d.Name, Template: d.Template,
		State: d.State, StateReason: d.StateReason, Address: d.Address, Executors: d.Executors, Extra: d.Extra,
		Labels: d.Labels, Node: d.NodeID, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

// provisionOne makes one machine and records the outcome. It outlives the
// request that asked for it.
func (c *Catalog) provisionOne(pr provision.Provider, d store.Deployment) {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	start := time.Now()
	made, err := pr.Provision(ctx, provision.Spec{Name: d.Name, Template: d.Template, Extra: d.Extra, Labels: d.Labels})
	_, uerr := c.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
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
		c.log.Warn("provisioning failed", "deployment", d.ID, "name", d.Name, "provider", d.Provider, "err", err)
	} else {
		c.log.Info("provisioned", "deployment", d.ID, "name", d.Name, "provider", d.Provider, "resource", made.ResourceID, "took", time.Since(start).Round(time.Millisecond))
	}
	if uerr != nil {
		c.log.Error("record provisioning outcome", "deployment", d.ID, "err", uerr)
		if err == nil {
			pr.Destroy(context.Background(), made) // untracked would mean orphaned
		}
	}
}

// ResolveDeployment finds a deployment by ID, or by name among live ones.
func (c *Catalog) ResolveDeployment(ctx context.Context, ref string) (store.Deployment, error) {
	d, err := c.store.GetDeployment(ctx, ref)
	if err == nil || !errdefs.IsNotFound(err) {
		return d, err
	}
	all, err := c.store.ListDeployments(ctx, store.DeploymentFilter{})
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

// DriftLoop compares tracked deployments with what their providers report,
// so a machine removed or stopped behind nodemgr's back is recorded as such
// rather than silently forgotten. Deployments left pending by a server that
// stopped mid-provisioning are marked failed.
func (c *Catalog) DriftLoop(ctx context.Context) {
	c.failInterrupted(ctx)
	t := time.NewTicker(c.cfg.DriftInterval)
	defer t.Stop()
	for {
		c.CheckDrift(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Catalog) failInterrupted(ctx context.Context) {
	pending, err := c.store.ListDeployments(ctx, store.DeploymentFilter{States: []string{provision.StatePending}})
	if err != nil {
		return
	}
	for _, d := range pending {
		if d.ResourceID != "" {
			continue // the drift check asks its provider
		}
		if !d.CreatedAt.Before(c.cfg.Started) {
			// This process may be provisioning it now: the loop starts
			// again with each term of leadership, not only at start.
			continue
		}
		c.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
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

// CheckDrift asks each live deployment's provider for its machine's state
// once and records a change made outside nodemgr, with the reason.
func (c *Catalog) CheckDrift(ctx context.Context) {
	list, err := c.store.ListDeployments(ctx, store.DeploymentFilter{})
	if err != nil {
		return
	}
	for _, d := range list {
		if d.ResourceID == "" || d.State == provision.StateTerminated || d.State == api.DeploymentFailed {
			continue
		}
		pr, err := c.providers.get(d.Provider)
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
		c.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
			cur.State, cur.StateReason = state, reason
			return nil
		})
		c.log.Warn("deployment drifted", "deployment", d.ID, "name", d.Name, "was", d.State, "now", state)
	}
}
