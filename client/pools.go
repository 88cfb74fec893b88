package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nodemgr/nodemgr/api"
)

// ApplyPool creates or replaces a pool.
func (c *Client) ApplyPool(ctx context.Context, spec api.PoolSpec) (api.Pool, error) {
	return call[api.Pool](ctx, c, http.MethodPut, "/v1/pools/"+url.PathEscape(spec.Name), spec)
}

// PatchPool changes the fields of a pool's spec that p sets (min, max,
// paused, priority) and leaves the rest.
func (c *Client) PatchPool(ctx context.Context, name string, p api.PoolPatch) (api.Pool, error) {
	return call[api.Pool](ctx, c, http.MethodPatch, "/v1/pools/"+url.PathEscape(name), p)
}

// Pools lists every pool.
func (c *Client) Pools(ctx context.Context) ([]api.Pool, error) {
	return allPages[api.Pool](ctx, c.PoolsPage)
}

// PoolsPage lists one page of pools, by name.
func (c *Client) PoolsPage(ctx context.Context, p Page) (api.PoolList, error) {
	return call[api.PoolList](ctx, c, http.MethodGet, withQuery("/v1/pools", p.values(url.Values{})), nil)
}

// Pool returns a pool with its machines.
func (c *Client) Pool(ctx context.Context, name string) (api.PoolDetail, error) {
	return call[api.PoolDetail](ctx, c, http.MethodGet, "/v1/pools/"+url.PathEscape(name), nil)
}

// DeletePool removes a pool; its machines are drained and destroyed.
func (c *Client) DeletePool(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/pools/"+url.PathEscape(name), nil, nil)
}

// PoolEvents lists a pool's decisions, oldest first.
func (c *Client) PoolEvents(ctx context.Context, name string) ([]api.PoolEvent, error) {
	return allPages[api.PoolEvent](ctx, func(ctx context.Context, p Page) (api.PoolEventList, error) {
		return c.PoolEventsPage(ctx, name, p)
	})
}

// PoolEventsPage lists one page of a pool's decisions.
func (c *Client) PoolEventsPage(ctx context.Context, name string, p Page) (api.PoolEventList, error) {
	return call[api.PoolEventList](ctx, c, http.MethodGet, withQuery("/v1/pools/"+url.PathEscape(name)+"/events", p.values(url.Values{})), nil)
}

// ExplainSchedule ranks every pool's candidates for a request.
func (c *Client) ExplainSchedule(ctx context.Context, req api.ScheduleRequest) (api.ScheduleExplanation, error) {
	return call[api.ScheduleExplanation](ctx, c, http.MethodPost, "/v1/schedule/explain", req)
}
