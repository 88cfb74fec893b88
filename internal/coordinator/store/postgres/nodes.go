package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const nodeColumns = `id, name, machine_id, data_dir, tags, labels, group_names, hardware,
	status, status_reason, agent_state, agent_version, current_suite, last_heartbeat, registered_at, updated_at, replica`

// CreateNode stores a new node. A machine has at most one node per data
// dir: a second one for the same (MachineID, DataDir) is a conflict that
// names the node already there.
func (s *Store) CreateNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.ID == "" {
		return store.Node{}, fmt.Errorf("create node for machine %s, data dir %s: %w", n.MachineID, n.DataDir, errdefs.Field("id", "required"))
	}
	var out store.Node
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.createNode(ctx, tx, n)
		return err
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("create node for machine %s, data dir %s: %w", n.MachineID, n.DataDir, err)
	}
	return out, nil
}

// JoinNode creates n and spends one use of the join token tokenID in one
// transaction: either both happen or neither does.
func (s *Store) JoinNode(ctx context.Context, tokenID string, now time.Time, n store.Node) (store.Node, error) {
	if n.ID == "" {
		return store.Node{}, fmt.Errorf("create node for machine %s, data dir %s: %w", n.MachineID, n.DataDir, errdefs.Field("id", "required"))
	}
	var out store.Node
	var tokenErr error // why the token was refused, if it was
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, tokenErr = s.Store.UseJoinTokenTx(ctx, pgQuerier{tx}, tokenID, now); tokenErr != nil {
			return tokenErr
		}
		var err error
		out, err = s.createNode(ctx, tx, n)
		return err
	})
	switch {
	case tokenErr != nil:
		return store.Node{}, fmt.Errorf("use join token %s: %w", tokenID, err)
	case err != nil:
		return store.Node{}, fmt.Errorf("create node for machine %s, data dir %s: %w", n.MachineID, n.DataDir, err)
	}
	return out, nil
}

// createNode stores a new node in tx, refusing a second one for its
// machine and data dir.
func (s *Store) createNode(ctx context.Context, tx pgx.Tx, n store.Node) (store.Node, error) {
	var existing string
	err := tx.QueryRow(ctx, `SELECT id FROM nodes WHERE machine_id = $1 AND data_dir = $2`,
		n.MachineID, n.DataDir).Scan(&existing)
	switch {
	case err == nil:
		return store.Node{}, fmt.Errorf("node %s is registered for this machine and data dir: %w", existing, errdefs.ErrConflict)
	case !noRows(err):
		return store.Node{}, err
	}
	now := s.now()
	n.RegisteredAt = sqlrow.OrNow(n.RegisteredAt, now)
	n.UpdatedAt = now
	if err := insertNode(ctx, tx, n); err != nil {
		return store.Node{}, err
	}
	return getNode(ctx, tx, n.ID, "")
}

// GetNode returns the node with the given ID.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := getNode(ctx, s.pool, id, "")
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %s: %w", id, err)
	}
	return n, nil
}

// getNode reads a node; lock is "" or a locking clause (FOR UPDATE).
func getNode(ctx context.Context, q querier, id, lock string) (store.Node, error) {
	return scanNode(q.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = $1 `+lock, id))
}

// ListNodes returns the nodes that match f, ordered by name and then ID.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	var where []string
	var a args
	if f.Status != "" {
		where = append(where, `status = `+a.add(f.Status))
	}
	if len(f.Groups) > 0 {
		where = append(where, `EXISTS (SELECT 1 FROM json_array_elements_text(nodes.group_names::json) AS g(name)
			WHERE g.name = ANY(`+a.add(f.Groups)+`))`)
	}
	if f.Replica != "" {
		where = append(where, `replica = `+a.add(f.Replica))
	}
	if f.After != "" {
		var name, id string
		if err := store.DecodeCursor(f.After, &name, &id); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		where = append(where, `(name, id) > (`+a.add(name)+`, `+a.add(id)+`)`)
	}
	nodes, err := s.queryNodes(ctx, where, a, f.Page)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeReplicas lists the replicas that the nodes in one of statuses last
// said hello to, each once.
func (s *Store) NodeReplicas(ctx context.Context, statuses ...string) ([]string, error) {
	var a args
	q := `SELECT DISTINCT replica FROM nodes WHERE replica != ''`
	if len(statuses) > 0 {
		q += ` AND status = ANY(` + a.add(statuses) + `)`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY replica`, a...)
	if err != nil {
		return nil, fmt.Errorf("list the replicas of nodes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the replicas of nodes: %w", err)
	}
	return out, nil
}

// StaleNodes lists the nodes in one of statuses (any status if none are
// given) whose last heartbeat is before cutoff. A node that has never sent
// one counts from its registration.
func (s *Store) StaleNodes(ctx context.Context, cutoff time.Time, statuses ...string) ([]store.Node, error) {
	var a args
	where := []string{`COALESCE(last_heartbeat, registered_at) < ` + a.add(cutoff.UnixNano())}
	if len(statuses) > 0 {
		where = append(where, `status = ANY(`+a.add(statuses)+`)`)
	}
	nodes, err := s.queryNodes(ctx, where, a, store.Page{})
	if err != nil {
		return nil, fmt.Errorf("stale nodes: %w", err)
	}
	return nodes, nil
}

func (s *Store) queryNodes(ctx context.Context, where []string, a args, p store.Page) ([]store.Node, error) {
	q := `SELECT ` + nodeColumns + ` FROM nodes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY name, id` + a.limit(p)
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	nodes := []store.Node{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, classify(rows.Err())
}

// UpdateNode applies fn to the node inside one transaction, with the
// node's row locked until it commits: fn must not write the node through
// the store, which would wait for that lock forever. If PostgreSQL aborts
// the transaction to break a deadlock, fn runs again on the node as it is
// then.
func (s *Store) UpdateNode(ctx context.Context, id string, fn func(*store.Node) error) (store.Node, error) {
	var out store.Node
	err := s.write(ctx, func(tx pgx.Tx) error {
		n, err := getNode(ctx, tx, id, "FOR UPDATE")
		if err != nil {
			return err
		}
		if err := fn(&n); err != nil {
			return err
		}
		if n.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		n.UpdatedAt = s.now()
		if err := updateNode(ctx, tx, n); err != nil {
			return err
		}
		out, err = getNode(ctx, tx, id, "")
		return err
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("update node %s: %w", id, err)
	}
	return out, nil
}

// recordHeartbeats applies a batch of beats in one statement, each row's
// conditions checked on the row as it is when the statement locks it.
// Every CASE reads the node as it was before this beat, as in the SQLite
// store; a beat older than the node's suspicion (batched beats arrive up to
// a flush late) must not clear it: the suspicion may be about the very
// connection that sent the beat.
const recordHeartbeats = `UPDATE nodes SET
		last_heartbeat = h.beat,
		agent_state = CASE WHEN status = $5 THEN agent_state ELSE h.state END,
		current_suite = CASE WHEN status = $5 THEN current_suite ELSE h.suite END,
		status = CASE WHEN status = $5 OR (status = $6 AND h.beat < updated_at) THEN status ELSE $7 END,
		status_reason = CASE WHEN status = $5 OR (status = $6 AND h.beat < updated_at) THEN status_reason ELSE '' END,
		updated_at = CASE WHEN status IN ($7, $5) OR (status = $6 AND h.beat < updated_at) THEN updated_at ELSE $8 END
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS h(id, beat, state, suite)
	WHERE nodes.id = h.id AND (nodes.last_heartbeat IS NULL OR nodes.last_heartbeat <= h.beat)`

// RecordHeartbeats stores a batch of heartbeats in one statement; it
// revives suspect nodes but never offline ones (see store.Nodes). A
// heartbeat older than the one stored is ignored. A zero At means now.
func (s *Store) RecordHeartbeats(ctx context.Context, hbs []store.Heartbeat) error {
	if len(hbs) == 0 {
		return nil
	}
	now := s.now()
	beats := latestBeats(hbs, now)
	ids := make([]string, len(beats))
	ats := make([]int64, len(beats))
	states := make([]string, len(beats))
	suites := make([]string, len(beats))
	for i, hb := range beats {
		ids[i], ats[i], states[i], suites[i] = hb.NodeID, hb.At.UnixNano(), hb.AgentState, hb.SuiteID
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, recordHeartbeats, planned, ids, ats, states, suites,
			api.StatusOffline, api.StatusSuspect, api.StatusOnline, now.UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("record %d heartbeats: %w", len(hbs), err)
	}
	return nil
}

// latestBeats keeps each node's latest beat (of equal ones, the last in
// the batch), which is what applying them one by one would leave, in node
// order, so that concurrent batches lock their nodes in the same order.
func latestBeats(hbs []store.Heartbeat, now time.Time) []store.Heartbeat {
	latest := make(map[string]int, len(hbs))
	var out []store.Heartbeat
	for _, hb := range hbs {
		hb.At = sqlrow.OrNow(hb.At, now)
		i, ok := latest[hb.NodeID]
		switch {
		case !ok:
			latest[hb.NodeID] = len(out)
			out = append(out, hb)
		case !hb.At.Before(out[i].At):
			out[i] = hb
		}
	}
	slices.SortFunc(out, func(a, b store.Heartbeat) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// SetNodeStatus moves a node to status, if its current status is one of
// onlyIf (any, if none are given).
func (s *Store) SetNodeStatus(ctx context.Context, id, status, reason string, onlyIf ...string) (changed bool, err error) {
	err = s.write(ctx, func(tx pgx.Tx) error {
		a := args{status, reason, s.now().UnixNano(), id}
		q := `UPDATE nodes SET status = $1, status_reason = $2, updated_at = $3 WHERE id = $4`
		if status == api.StatusOffline {
			// An offline node runs no agent: it has no state and no suite.
			q = `UPDATE nodes SET status = $1, status_reason = $2, updated_at = $3, agent_state = '', current_suite = '' WHERE id = $4`
		}
		if len(onlyIf) > 0 {
			q += ` AND status = ANY(` + a.add(onlyIf) + `)`
		}
		tag, err := tx.Exec(ctx, q, a...)
		if err != nil {
			return err
		}
		if changed = tag.RowsAffected() > 0; changed {
			return nil
		}
		return nodeExists(ctx, tx, id)
	})
	if err != nil {
		return false, fmt.Errorf("set node %s status %s: %w", id, status, err)
	}
	return changed, nil
}

// DeleteNode removes a node; its notifications, credentials and problems
// go with it (ON DELETE CASCADE), and its container reports.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if err := mustAffect(tag); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM containers WHERE node_id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete node %s: %w", id, err)
	}
	return nil
}

func insertNode(ctx context.Context, tx pgx.Tx, n store.Node) error {
	a, err := sqlrow.NodeArgs(n)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO nodes (`+nodeColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`,
		append([]any{n.ID}, a...)...)
	if isUnique(err) {
		if constraint(err) == "nodes_pkey" {
			return errdefs.Conflict("node id %s is taken", n.ID)
		}
		return errdefs.Conflict("machine %s already has a node for data dir %s", n.MachineID, n.DataDir)
	}
	return err
}

func updateNode(ctx context.Context, tx pgx.Tx, n store.Node) error {
	a, err := sqlrow.NodeArgs(n)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE nodes SET
			name = $1, machine_id = $2, data_dir = $3, tags = $4, labels = $5, group_names = $6,
			hardware = $7, status = $8, status_reason = $9, agent_state = $10, agent_version = $11,
			current_suite = $12, last_heartbeat = $13, registered_at = $14, updated_at = $15, replica = $16
		WHERE id = $17`,
		append(a, n.ID)...)
	if isUnique(err) {
		return errdefs.Conflict("machine %s already has a node for data dir %s", n.MachineID, n.DataDir)
	}
	return err
}

// scanNode reads a row of nodeColumns. A missing row is errdefs.ErrNotFound.
func scanNode(row scanner) (store.Node, error) {
	var (
		n                        store.Node
		tags, labels, groups, hw string
		lastHeartbeat            *int64
		registeredAt, updatedAt  int64
	)
	err := row.Scan(&n.ID, &n.Name, &n.MachineID, &n.DataDir, &tags, &labels, &groups, &hw,
		&n.Status, &n.StatusReason, &n.AgentState, &n.AgentVersion, &n.CurrentSuite,
		&lastHeartbeat, &registeredAt, &updatedAt, &n.Replica)
	if noRows(err) {
		return store.Node{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Node{}, classify(err)
	}
	if n.Tags, err = sqlrow.Strings(tags); err != nil {
		return store.Node{}, fmt.Errorf("node %s tags: %w", n.ID, err)
	}
	if n.Labels, err = sqlrow.Map(labels); err != nil {
		return store.Node{}, fmt.Errorf("node %s labels: %w", n.ID, err)
	}
	if n.Groups, err = sqlrow.Strings(groups); err != nil {
		return store.Node{}, fmt.Errorf("node %s groups: %w", n.ID, err)
	}
	if err := json.Unmarshal([]byte(hw), &n.Hardware); err != nil {
		return store.Node{}, fmt.Errorf("node %s hardware: %w", n.ID, err)
	}
	if n.Hardware.GPUs == nil {
		n.Hardware.GPUs = []api.GPU{}
	}
	n.LastHeartbeat = timeOf(lastHeartbeat)
	n.RegisteredAt = sqlrow.FromNanos(registeredAt)
	n.UpdatedAt = sqlrow.FromNanos(updatedAt)
	return n, nil
}

// nodeExists is nil if the node exists and errdefs.ErrNotFound if not.
func nodeExists(ctx context.Context, q querier, id string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM nodes WHERE id = $1`, id).Scan(&one)
	if noRows(err) {
		return errdefs.ErrNotFound
	}
	return err
}
