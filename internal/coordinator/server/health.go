package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
)

// Health: /healthz answers ok only if the store takes a write. The probe
// is one small real write with a short timeout; its answer is kept for
// healthTTL so that load balancers polling /healthz cost the store at most
// one write per healthTTL.
const (
	healthTTL          = 2 * time.Second
	healthProbeTimeout = 2 * time.Second
)

// prober is a store that can say whether it takes writes (store/sqlite).
type prober interface {
	Probe(ctx context.Context) error
}

// healthCheck caches the store probe's last answer.
type healthCheck struct {
	mu      sync.Mutex
	at      time.Time // of the last answer; zero: none yet
	err     error
	probing bool
}

// storeHealth returns the store probe's answer, probing again when the
// last one is older than healthTTL. While one probe runs, other callers get
// the previous answer rather than queueing behind it (a store that hangs
// must not hang every /healthz).
func (s *Server) storeHealth(ctx context.Context) error {
	p, ok := s.backend.(prober)
	if !ok {
		return nil
	}
	h := &s.health
	h.mu.Lock()
	if (!h.at.IsZero() && time.Since(h.at) < healthTTL) || (h.probing && !h.at.IsZero()) {
		err := h.err
		h.mu.Unlock()
		return err
	}
	h.probing = true
	h.mu.Unlock()

	// Not the request's context: a client that hangs up must not leave a
	// cancelled probe's answer for everyone else.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthProbeTimeout)
	err := p.Probe(pctx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("the store took longer than %s to write: %w", healthProbeTimeout, errdefs.ErrUnavailable)
	}
	h.mu.Lock()
	h.at, h.err, h.probing = time.Now(), err, false
	h.mu.Unlock()
	return err
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	if err := s.storeHealth(r.Context()); err != nil {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			err = errdefs.Class(err, errdefs.ErrUnavailable) // unhealthy is 503 whatever the cause
		}
		return fmt.Errorf("unhealthy: %w", err)
	}
	lease, leader := s.hub.Leads()
	httpapi.WriteJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.cfg.Version,
		Replica: s.cfg.ReplicaID, Leader: leader, Term: lease.Term})
	return nil
}

// explainStorageFull turns a full disk, whatever the operation, into the
// one message that says what to do. The operation goes to the log.
func (s *Server) explainStorageFull(err error) error {
	if !errors.Is(err, errdefs.ErrStorageFull) {
		return err
	}
	s.log.Error("the store's disk is full", "err", err)
	where := "the server's data dir"
	if s.cfg.DataDir != "" {
		where = "DATA_DIR (" + s.cfg.DataDir + ")"
	}
	return fmt.Errorf("the server's disk is full: free space on the volume of %s and retry: %w", where, errdefs.ErrStorageFull)
}
