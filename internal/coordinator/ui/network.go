package ui

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"

	"github.com/nodemgr/nodemgr/api"
)

// ---- the overlay network

// overlayPeersShown is how many of a node's peers its row names: in a
// mesh of one group every node peers with every other, so a row names a
// few and counts the rest, and the page stays small.
const overlayPeersShown = 8

type networkData struct {
	Network string // the overlay's prefix
	Rows    []overlayRow
	Pager   pager
}

// overlayRow is one node of the overlay's table.
type overlayRow struct {
	api.OverlayNode
	PeerRefs  []peerRef // the first overlayPeersShown peers
	MorePeers int       // and how many more there are
}

// peerRef is a peer by name, with its node ID to link it; no ID where
// the name is not one node's (two nodes may share a name).
type peerRef struct{ Name, ID string }

// networkPage lists the nodes on the overlay that the user may read.
// GET /v1/network answers them all, in block order; the page shows
// pageSize of them, after the node ID in ?after.
func (u *UI) networkPage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Title, v.Nav = "network", "Network", "network"
	d := &networkData{}
	v.Data = d
	var l api.OverlayList
	if err := v.c.get(ctx, "/v1/network", nil, &l); err != nil {
		return err
	}
	d.Network = l.Network
	nodes, next, err := overlayPage(l.Nodes, r.URL.Query().Get("after"))
	if err != nil {
		return err
	}
	d.Pager = makePager(r, next)
	ids := make(map[string]string, len(l.Nodes))
	for _, n := range l.Nodes {
		if _, twice := ids[n.Node]; twice {
			ids[n.Node] = ""
			continue
		}
		ids[n.Node] = n.NodeID
	}
	for _, n := range nodes {
		row := overlayRow{OverlayNode: n, MorePeers: max(0, len(n.Peers)-overlayPeersShown)}
		for _, p := range n.Peers[:min(len(n.Peers), overlayPeersShown)] {
			row.PeerRefs = append(row.PeerRefs, peerRef{Name: p, ID: ids[p]})
		}
		d.Rows = append(d.Rows, row)
	}
	return nil
}

// overlayPage cuts one page of the overlay's nodes: those after the node
// with ID after ("": from the first), and the ID the next page starts
// after ("": this is the last).
func overlayPage(nodes []api.OverlayNode, after string) ([]api.OverlayNode, string, error) {
	start := 0
	if after != "" {
		i := slices.IndexFunc(nodes, func(n api.OverlayNode) bool { return n.NodeID == after })
		if i < 0 {
			// What the API says of a cursor it does not know.
			return nil, "", &apiError{Status: http.StatusBadRequest,
				Message: fmt.Sprintf("after: node %s is not on the overlay (any more): start again from the first page", after)}
		}
		start = i + 1
	}
	end := min(start+pageSize, len(nodes))
	var next string
	if end < len(nodes) {
		next = nodes[end-1].NodeID
	}
	return nodes[start:end], next, nil
}

type overlayNodeData struct {
	Node api.Node
	// Device is what the node's agent says of its WireGuard device now;
	// nil, with DeviceError, when it could not say (offline, not on the
	// overlay).
	Device      *api.OverlayDevice
	DeviceError string
}

// overlayNodePage shows one node's overlay device and its links, as the
// node's agent sees them now.
func (u *UI) overlayNodePage(ctx context.Context, r *http.Request, v *view) error {
	v.Page, v.Nav = "overlay", "network"
	d := &overlayNodeData{}
	v.Data = d
	v.Title = r.PathValue("node")
	if err := v.c.get(ctx, "/v1/nodes/"+esc(r.PathValue("node")), nil, &d.Node); err != nil {
		return err
	}
	v.Title = d.Node.Name
	var dev api.OverlayDevice
	if err := v.c.get(ctx, "/v1/nodes/"+esc(d.Node.ID)+"/overlay", nil, &dev); err != nil {
		// The agent answers for its device: its absence is the panel's
		// news, not the page's failure.
		d.DeviceError = err.Error()
		return nil
	}
	// Peers by name; those the agent has no name for (a state it has not
	// had yet) after them.
	slices.SortStableFunc(dev.Links, func(a, b api.OverlayLink) int {
		return cmp.Or(cmp.Compare(b2i(a.Node == ""), b2i(b.Node == "")), cmp.Compare(a.Node, b.Node), cmp.Compare(a.PublicKey, b.PublicKey))
	})
	d.Device = &dev
	return nil
}

// hostAddr shows a single-address prefix (100.64.3.1/32) as its address;
// anything else as it is.
func hostAddr(s string) string {
	if p, err := netip.ParsePrefix(s); err == nil && p.IsSingleIP() {
		return p.Addr().String()
	}
	return s
}
