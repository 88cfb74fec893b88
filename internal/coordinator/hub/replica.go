package hub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tick"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Replica liveness. Each server process holds a lease of its own,
// "replica/ID", of the leader's TTL (--leader-lease) but renewed every second,
// with itself as the holder: its replica ID and a random instance, so that
// two processes started with one --replica-id are two holders, and the
// second is refused at start. A node remembers the process it said hello
// to (store.Node.Replica); the leader watches the leases of the processes
// that live nodes name, and when one stops renewing (killed, frozen, cut
// off from the store) its nodes go the way of a dropped connection:
// offline ReconnectGrace after the process was last alive, unless their
// agents said hello elsewhere. A process that finds its own lease ran out
// (it was frozen past it) closes every session it holds: the leader may
// have given their tasks away, and a new hello says which.

// replicaLeaseName names the lease of the replica with that ID.
func replicaLeaseName(id string) string { return "replica/" + id }

// newInstance names this process: its replica ID and a random part.
func newInstance(replicaID string) string {
	return replicaID + "#" + strings.TrimPrefix(auth.NewID("i-"), "i-")[:8]
}

// replicaOf returns the replica ID of an instance.
func replicaOf(instance string) string {
	id, _, _ := strings.Cut(instance, "#")
	return id
}

// ClaimReplica takes this process's replica lease at start. A lease held
// by another instance is either a previous run that died (it renews no
// more: taken over when it runs out, at most --leader-lease later) or a
// second live server started with the same --replica-id: refused.
func (h *Hub) ClaimReplica(ctx context.Context) (store.Lease, error) {
	name := replicaLeaseName(h.cfg.ReplicaID)
	for {
		l, err := h.store.AcquireLease(ctx, name, h.instance, h.cfg.LeaderLease)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return store.Lease{}, fmt.Errorf("take the replica lease %s: %w", name, err)
		}
		held, err := h.store.GetLease(ctx, name)
		if err != nil {
			return store.Lease{}, fmt.Errorf("read the replica lease %s: %w", name, err)
		}
		if !h.cfg.Sole {
			if err := h.watchReplicaLease(ctx, held); err != nil {
				return store.Lease{}, err
			}
		}
		h.log.Info("taking over the replica lease a previous run of this replica left", "replica", h.cfg.ReplicaID, "previous", held.Holder)
		if err := h.store.ReleaseLease(ctx, name, held.Holder); err != nil {
			return store.Lease{}, fmt.Errorf("take over the replica lease %s: %w", name, err)
		}
	}
}

// watchReplicaLease watches a replica lease another instance holds until
// it expires: a live holder renews it meanwhile (every second), and this
// process is a second server on its replica ID, refused; a holder that
// renews no more is a previous run that died, whose lease may be taken
// over. A lease released or taken by another meanwhile ends the watch too.
func (h *Hub) watchReplicaLease(ctx context.Context, held store.Lease) error {
	h.log.Info("the replica lease is held by another process; waiting to see whether it is alive",
		"replica", h.cfg.ReplicaID, "holder", held.Holder, "until", held.Expires)
	for time.Now().Before(held.Expires) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.replicaRenewEvery()):
		}
		now, err := h.store.GetLease(ctx, held.Name)
		switch {
		case err != nil:
			return fmt.Errorf("read the replica lease %s: %w", held.Name, err)
		case now.Holder != held.Holder:
			return nil
		case now.Expires.After(held.Expires):
			return fmt.Errorf("another server is running with replica id %q (instance %s renews its lease): "+
				"give each server its own --replica-id, or stop the other one first: %w", h.cfg.ReplicaID, now.Holder, errdefs.ErrConflict)
		}
	}
	return nil
}

// replicaLoop renews this process's replica lease until ctx ends. It
// returns an error only when another process took the lease: two servers
// run with one replica ID, and this one must stop.
func (h *Hub) replicaLoop(ctx context.Context, lease store.Lease) error {
	name := replicaLeaseName(h.cfg.ReplicaID)
	valid := time.Now().Add(h.cfg.LeaderLease)
	t := time.NewTicker(h.replicaRenewEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			h.store.ReleaseLease(rctx, name, h.instance)
			cancel()
			return nil
		case <-t.C:
		}
		sent := time.Now()
		l, err := h.store.AcquireLease(ctx, name, h.instance, h.cfg.LeaderLease)
		switch {
		case err == nil && l.Term == lease.Term:
			valid = sent.Add(h.cfg.LeaderLease)
		case err == nil:
			// It ran out before this renewal: the process was frozen, or
			// cut off from the store, long enough for the leader to count
			// its agents gone.
			h.log.Warn("this server's replica lease ran out (it was frozen or cut off from the store); "+
				"closing its agents' sessions so that each says hello again", "replica", h.cfg.ReplicaID, "sessions", h.Count())
			h.CloseAll("this server was out of touch; say hello again")
			lease, valid = l, sent.Add(h.cfg.LeaderLease)
		case errors.Is(err, errdefs.ErrConflict):
			h.CloseAll("another server took this replica id")
			return fmt.Errorf("another server process took over replica id %q (%v): give each server its own --replica-id", h.cfg.ReplicaID, err)
		case ctx.Err() != nil:
		default:
			h.log.Warn("renew the replica lease; retrying", "replica", h.cfg.ReplicaID,
				"left", time.Until(valid).Round(time.Millisecond), "err", err)
		}
	}
}

// replicaRenewEvery is how often a process renews its replica lease:
// often, because when it dies the leader can tell its last sign of life
// only to within this, and must allow for it before it takes the
// process's nodes offline. One small write a second per replica.
func (h *Hub) replicaRenewEvery() time.Duration { return min(time.Second, h.renewEvery()) }

// replicaLives caches what this server knows of other processes'
// replica leases: whether each is alive, and since when it is not.
type replicaLives struct {
	mu   sync.Mutex
	seen map[string]replicaLife // instance → what its lease said
}

type replicaLife struct {
	checked time.Time
	alive   bool
	// lastAlive is when the process last renewed, as far as its lease
	// tells (its expiry less the TTL), for one that is no more.
	lastAlive time.Time
}

// replicaAliveTTL is how long a look at a replica lease is reused.
const replicaAliveTTL = time.Second

// replicaLife says whether the process instance still renews its replica
// lease, looking at most once a replicaAliveTTL.
func (h *Hub) replicaLife(ctx context.Context, instance string) (replicaLife, error) {
	if instance == h.instance {
		return replicaLife{alive: true}, nil
	}
	now := time.Now()
	h.replicas.mu.Lock()
	life, ok := h.replicas.seen[instance]
	h.replicas.mu.Unlock()
	if ok && now.Sub(life.checked) < replicaAliveTTL {
		return life, nil
	}
	l, err := h.store.GetLease(ctx, replicaLeaseName(replicaOf(instance)))
	switch {
	case errdefs.IsNotFound(err):
		life = replicaLife{lastAlive: now} // no lease ever: a server older than leases
	case err != nil:
		return replicaLife{}, err
	case l.Holder == instance && now.Before(l.Expires):
		life = replicaLife{alive: true}
	case l.Holder == instance:
		life = replicaLife{lastAlive: l.Expires.Add(-h.cfg.LeaderLease)}
	default:
		// Released at shutdown, or taken by a new run of the replica:
		// gone by now.
		life = replicaLife{lastAlive: now}
	}
	life.checked = now
	h.replicas.mu.Lock()
	if h.replicas.seen == nil {
		h.replicas.seen = map[string]replicaLife{}
	}
	if old, ok := h.replicas.seen[instance]; ok && !old.alive && !life.alive && old.lastAlive.Before(life.lastAlive) {
		life.lastAlive = old.lastAlive // gone since the first time it was seen gone
	}
	h.replicas.seen[instance] = life
	if len(h.replicas.seen) > 10_000 {
		clear(h.replicas.seen)
	}
	h.replicas.mu.Unlock()
	return life, nil
}

// deadReplicaLoop, on the leader, finds the nodes whose session was on a
// server process that stopped renewing its replica lease, and checks each
// as a lost connection from when that process was last alive. With one
// server (SQLite) there are no others to watch.
func (h *Hub) deadReplicaLoop(ctx context.Context) {
	if !h.Relayed() {
		return
	}
	tick.Every(ctx, deadReplicaTick, func() {
		instances, err := h.store.NodeReplicas(ctx, api.StatusOnline, api.StatusSuspect)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("list the servers nodes are connected to", "err", err)
			}
			return
		}
		for _, inst := range instances {
			life, err := h.replicaLife(ctx, inst)
			if err != nil || life.alive {
				continue
			}
			h.replicaGone(ctx, inst, life.lastAlive)
		}
	})
}

// deadReplicaTick is how often the leader looks for dead replicas.
const deadReplicaTick = time.Second

// replicaGone starts the check of every live node whose agent's session
// was on the dead process inst, last alive at lastAlive.
func (h *Hub) replicaGone(ctx context.Context, inst string, lastAlive time.Time) {
	// It may have lived, and heard from its agents, until the renewal it
	// missed: the grace counts from then.
	since := lastAlive.Add(h.replicaRenewEvery())
	if lastAlive.Before(h.started) {
		// It died before this server started: a restart of them all,
		// after which agents backing off get OfflineAfter to come back,
		// as for heartbeats.
		since = h.started.Add(h.cfg.OfflineAfter - h.cfg.ReconnectGrace)
	}
	for _, status := range []string{api.StatusOnline, api.StatusSuspect} {
		nodes, err := h.store.ListNodes(ctx, store.NodeFilter{Replica: inst, Status: status})
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("list the nodes of a server that stopped", "server", inst, "err", err)
			}
			return
		}
		for _, n := range nodes {
			h.live.startCheck(n.ID, func() {
				wait := max(0, time.Until(since.Add(h.cfg.ReconnectGrace)))
				reason := fmt.Sprintf("its server %s stopped (last alive %s); waiting %s for the agent to connect to another",
					replicaOf(inst), lastAlive.UTC().Format(time.RFC3339), wait.Round(time.Millisecond))
				if h.suspect(ctx, n, reason) {
					h.confirm(ctx, n, n.LastHeartbeat, wait, fmt.Sprintf("its server %s stopped", replicaOf(inst)))
				}
			})
		}
	}
}
