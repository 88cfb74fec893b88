package server

import (
	"context"

	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// newHub makes the server's live side over st, the unbounded store for
// its capabilities (signals, a sole server); its calls go through the
// bounded one.
func (s *Server) newHub(st store.Store) *hub.Hub {
	sig, _ := st.(store.Signals)
	sole, _ := st.(soleServer)
	cfg := hub.Config{
		ReplicaID: s.cfg.ReplicaID, OfflineAfter: s.cfg.OfflineAfter, ConfirmTimeout: s.cfg.ConfirmTimeout,
		ReconnectGrace: s.cfg.ReconnectGrace, FlushInterval: s.cfg.FlushInterval, LeaderLease: s.cfg.LeaderLease,
		CallTimeout: forwardLongTimeout, Sole: sole != nil && sole.SoleServer(),
	}
	return hub.New(cfg, s.store, sig, hub.Hooks{
		Reclaim:    func(ctx context.Context, nodeID, reason string) { s.dispatcher.Reclaim(ctx, nodeID, reason) },
		Singletons: s.singletons,
		WakeOrchestrator: func() {
			if s.orch != nil { // not serving yet
				s.orch.Wake()
			}
		},
		SuiteCancelled: func(ctx context.Context, suiteID string) { s.dispatcher.LocalSuiteCancelled(ctx, suiteID) },
	}, s.log)
}

// soleServer is a store that serves one server process (store/sqlite): a
// lease it holds for another replica was left by a server that stopped
// without releasing it.
type soleServer interface {
	SoleServer() bool
}

// singletons are the server's loops that run on the leader only, each
// with the term's fenced context (the hub adds its liveness loops).
func (s *Server) singletons() []func(context.Context) {
	loops := []func(context.Context){s.orch.Lead, s.dispatcher.SuiteLoop, s.ensembles.Loop, s.catalog.DriftLoop}
	if s.blobsShared() {
		loops = append(loops, s.files.Loop)
	}
	return loops
}

// blobsShared reports whether the blob store is one the replicas share
// (configured, such as S3), where one replica collects for all; a data
// dir's own blobs are collected by their replica.
func (s *Server) blobsShared() bool { return s.cfg.Blobs != nil }
