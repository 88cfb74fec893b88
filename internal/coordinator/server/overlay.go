package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// overlayAgents are this server's sessions as the overlay reaches them.
type overlayAgents struct{ hub *hub.Hub }

func (a overlayAgents) Local() []string {
	all := a.hub.All()
	ids := make([]string, 0, len(all))
	for _, sess := range all {
		ids = append(ids, sess.NodeID)
	}
	return ids
}

func (a overlayAgents) Send(ctx context.Context, nodeID string, st api.OverlayState) error {
	sess := a.hub.Get(nodeID)
	if sess == nil {
		return errdefs.Class(fmt.Errorf("node %s is not connected here", nodeID), errdefs.ErrUnavailable)
	}
	return sess.Call(ctx, api.MethodOverlayState, st, nil)
}

// overlayJoin answers overlay.join: the node's place on the overlay.
func (h *agentHandler) overlayJoin(ctx context.Context, body json.RawMessage) (any, error) {
	var j api.OverlayJoin
	if err := httpapi.DecodeStrict(body, &j); err != nil {
		return nil, err
	}
	return h.s.overlay.Join(ctx, h.sess.NodeID, h.sess.Addr, j)
}

// relayTimeout bounds the delivery of one batch of relayed packets.
const relayTimeout = 5 * time.Second

// overlayRelay answers overlay.relay: it passes the packets to the peer's
// agent when the peer is connected to this server, and drops them
// otherwise, as a network would. The answer does not wait for the
// delivery.
func (h *agentHandler) overlayRelay(body json.RawMessage) (any, error) {
	var p api.OverlayPackets
	if err := httpapi.DecodeStrict(body, &p); err != nil {
		return nil, err
	}
	if len(p.Packets) == 0 || len(p.Packets) > api.OverlayRelayMaxPackets {
		return nil, errdefs.Field("packets", "want 1 to %d, got %d", api.OverlayRelayMaxPackets, len(p.Packets))
	}
	for i, pkt := range p.Packets {
		if len(pkt) == 0 || len(pkt) > api.OverlayRelayMaxPacket {
			return nil, errdefs.Field(fmt.Sprintf("packets[%d]", i), "want 1 to %d bytes, got %d", api.OverlayRelayMaxPacket, len(pkt))
		}
	}
	if !h.s.overlay.MayRelay(h.sess.NodeID, p.Peer) {
		return nil, errdefs.Field("peer", "%q is not a peer of this node on the overlay", p.Peer)
	}
	to := h.s.hub.Get(p.Peer)
	if to == nil {
		h.s.metrics.overlayRelayDropped.Inc()
		return struct{}{}, nil // not here: dropped (relaying between replicas is not done yet)
	}
	h.s.metrics.overlayRelayed.Add(float64(len(p.Packets)))
	from := h.sess.NodeID
	go func() {
		ctx, cancel := context.WithTimeout(h.s.lifeCtx(), relayTimeout)
		defer cancel()
		if err := to.Call(ctx, api.MethodOverlayRelayed, api.OverlayPackets{Peer: from, Packets: p.Packets}, nil); err != nil {
			h.s.metrics.overlayRelayDropped.Inc()
		}
	}()
	return struct{}{}, nil
}

// handleListNetwork lists the nodes on the overlay that the caller may read.
func (s *Server) handleListNetwork(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	out, err := s.overlay.List(r.Context(), func(n store.Node) bool { return p.Can(api.RoleRead, n.Groups) })
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// overlayCollector gives, for each agent connected here, its overlay
// links as its last heartbeat said: per-peer handshake age and bytes.
type overlayCollector struct{ hub *hub.Hub }

var (
	overlayHandshakeAge = prometheus.NewDesc("nodemgr_overlay_peer_handshake_age_seconds",
		"Seconds since the node's last WireGuard handshake with the peer, as its last heartbeat said; absent: never.", []string{"node_id", "peer_id"}, nil)
	overlayReceived = prometheus.NewDesc("nodemgr_overlay_peer_received_bytes_total",
		"Bytes the node received from the peer over the overlay, as its last heartbeat said.", []string{"node_id", "peer_id"}, nil)
	overlaySent = prometheus.NewDesc("nodemgr_overlay_peer_sent_bytes_total",
		"Bytes the node sent the peer over the overlay, as its last heartbeat said.", []string{"node_id", "peer_id"}, nil)
)

func (c overlayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- overlayHandshakeAge
	ch <- overlayReceived
	ch <- overlaySent
}

func (c overlayCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, sess := range c.hub.All() {
		for _, l := range sess.OverlayLinks() {
			if l.NodeID == "" {
				continue
			}
			if l.LastHandshake != nil {
				ch <- prometheus.MustNewConstMetric(overlayHandshakeAge, prometheus.GaugeValue, now.Sub(*l.LastHandshake).Seconds(), sess.NodeID, l.NodeID)
			}
			ch <- prometheus.MustNewConstMetric(overlayReceived, prometheus.CounterValue, float64(l.RxBytes), sess.NodeID, l.NodeID)
			ch <- prometheus.MustNewConstMetric(overlaySent, prometheus.CounterValue, float64(l.TxBytes), sess.NodeID, l.NodeID)
		}
	}
}
