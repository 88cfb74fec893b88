package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
)

var archPattern = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// handleAgentBinary serves a pull-bootstrapped pool machine its agent:
// the artifact for its arch, compressed, with its digest in a header. Only
// a pool machine's bootstrap token, not yet spent, fetches it; the first
// fetch binds the machine's deployment to the machine id sent, so the
// token then registers that machine only (enroll.BindMachine), and a
// fetch for another machine id is refused.
func (s *Server) handleAgentBinary(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, err := s.authenticate(ctx, r, api.TokenJoin)
	if err != nil {
		return err
	}
	if t.DeploymentID == "" {
		return fmt.Errorf("only a pool machine's bootstrap token fetches the agent here; install nodemgr on other machines by hand (see docs/install.md): %w", errdefs.ErrPermission)
	}
	if t.MaxUses > 0 && t.Uses >= t.MaxUses {
		return fmt.Errorf("join token %s was used already: its machine's agent registered; a machine fetches its agent once: %w", t.ID, errdefs.ErrPermission)
	}
	q := r.URL.Query()
	arch, machineID := q.Get("arch"), q.Get("machine_id")
	if !archPattern.MatchString(arch) {
		return errdefs.Field("arch", "want the machine's architecture as uname -m prints it (x86_64, aarch64), got %q", arch)
	}
	if machineID == "" || len(machineID) > 128 {
		return errdefs.Field("machine_id", "must be 1-128 characters")
	}
	d, err := s.enroll.BindMachine(ctx, t, machineID, r.RemoteAddr)
	if err != nil {
		return err
	}
	art, err := s.orch.AgentArtifact(arch)
	if err != nil {
		return err
	}
	f, err := os.Open(art.Path)
	if err != nil {
		return fmt.Errorf("open the agent artifact: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open the agent artifact: %w", err)
	}
	if pool := d.Labels[orchestrate.LabelPool]; pool != "" {
		s.poolEvent(ctx, pool, d.Labels[orchestrate.LabelMachine], "fetched", fmt.Sprintf("machine %s fetched its agent (%s, %d bytes) from %s",
			d.Labels[orchestrate.LabelMachine], arch, art.Size, r.RemoteAddr))
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set(orchestrate.DigestHeader, art.SHA256)
	http.ServeContent(w, r, "nodemgr.gz", fi.ModTime(), f)
	return nil
}

// poolEvent records an event of a pool; a failure to is logged, not
// returned: the event only tells what happened.
func (s *Server) poolEvent(ctx context.Context, pool, machine, kind, msg string) {
	if _, err := s.store.AddPoolEvent(ctx, api.PoolEvent{Pool: pool, Machine: machine, Kind: kind, Message: msg}); err != nil {
		s.log.Warn("record pool event", "pool", pool, "err", err)
	}
}
