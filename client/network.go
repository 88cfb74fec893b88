package client

import (
	"context"
	"net/http"

	"github.com/nodemgr/nodemgr/api"
)

// Network lists the nodes on the overlay network that the caller may read,
// with their blocks, keys, endpoints and peers as the server has them.
func (c *Client) Network(ctx context.Context) (api.OverlayList, error) {
	return call[api.OverlayList](ctx, c, http.MethodGet, "/v1/network", nil)
}

// Overlay returns node's overlay device as its agent sees it now: each
// peer's endpoint, last handshake and bytes.
func (c *Client) Overlay(ctx context.Context, node string) (api.OverlayDevice, error) {
	return call[api.OverlayDevice](ctx, c, http.MethodGet, nodePath(node, "/overlay"), nil)
}
