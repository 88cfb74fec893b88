package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nodemgr/nodemgr/api"
)

// DeployEnsemble places and deploys an ensemble, all or none; with dryRun
// it answers the plan and deploys nothing. policy is binpack (default,
// "") or spread.
func (c *Client) DeployEnsemble(ctx context.Context, spec api.EnsembleSpec, policy string, dryRun bool) (api.Ensemble, error) {
	q := url.Values{}
	if policy != "" {
		q.Set("policy", policy)
	}
	if dryRun {
		q.Set("dry_run", "true")
	}
	return call[api.Ensemble](ctx, c, http.MethodPost, withQuery("/v1/ensembles", q), spec)
}

// Ensembles lists the caller's ensembles; all includes shut down and
// failed ones.
func (c *Client) Ensembles(ctx context.Context, all bool) ([]api.Ensemble, error) {
	q := url.Values{}
	if all {
		q.Set("all", "true")
	}
	l, err := call[api.EnsembleList](ctx, c, http.MethodGet, withQuery("/v1/ensembles", q), nil)
	return l.Ensembles, err
}

// Ensemble returns one ensemble by ID or name, with its replicas' status.
func (c *Client) Ensemble(ctx context.Context, ref string) (api.Ensemble, error) {
	return call[api.Ensemble](ctx, c, http.MethodGet, "/v1/ensembles/"+url.PathEscape(ref), nil)
}

// ShutdownEnsemble deletes every replica's container.
func (c *Client) ShutdownEnsemble(ctx context.Context, ref string) (api.Ensemble, error) {
	return call[api.Ensemble](ctx, c, http.MethodPost, "/v1/ensembles/"+url.PathEscape(ref)+"/shutdown", nil)
}
