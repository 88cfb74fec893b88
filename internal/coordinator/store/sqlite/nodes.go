package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
	var out store.Node
	err := s.write(ctx, func(tx *sql.Tx) error {
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
	var out store.Node
	var tokenErr error // why the token was refused, if it was
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, tokenErr = s.Store.UseJoinTokenTx(ctx, sqlQ{tx}, tokenID, now); tokenErr != nil {
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
func (s *Store) createNode(ctx context.Context, tx *sql.Tx, n store.Node) (store.Node, error) {
	if n.ID == "" {
		return store.Node{}, errdefs.Field("id", "required")
	}
	var existing string
	err := tx.QueryRowContext(ctx, `SELECT id FROM nodes WHERE machine_id = ? AND data_dir = ?`,
		n.MachineID, n.DataDir).Scan(&existing)
	switch {
	case err == nil:
		return store.Node{}, fmt.Errorf("node %s is registered for this machine and data dir: %w", existing, errdefs.ErrConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return store.Node{}, classify(err)
	}
	now := s.now()
	n.RegisteredAt = sqlrow.OrNow(n.RegisteredAt, now)
	n.UpdatedAt = now
	if err := insertNode(ctx, tx, n); err != nil {
		return store.Node{}, err
	}
	return getNode(ctx, tx, n.ID)
}

// GetNode returns the node with the given ID.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := getNode(ctx, s.r, id)
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %s: %w", id, err)
	}
	return n, nil
}

func getNode(ctx context.Context, q querier, id string) (store.Node, error) {
	return scanNode(q.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = ?`, id))
}

// ListNodes returns the nodes that match f, ordered by name and then ID.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	var where []string
	var args []any
	if f.Status != "" {
		where = append(where, `status = ?`)
		args = append(args, f.Status)
	}
	if len(f.Groups) > 0 {
		groups, err := sqlrow.JSONArg(f.Groups)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		where = append(where, `EXISTS (SELECT 1 FROM json_each(nodes.group_names) AS g
			WHERE g.value IN (SELECT value FROM json_each(?)))`)
		args = append(args, groups)
	}
	if f.Replica != "" {
		where = append(where, `replica = ?`)
		args = append(args, f.Replica)
	}
	if f.After != "" {
		var name, id string
		if err := store.DecodeCursor(f.After, &name, &id); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		where = append(where, `(name, id) > (?, ?)`)
		args = append(args, name, id)
	}
	nodes, err := s.queryNodes(ctx, where, args, f.Page)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeReplicas lists the replicas that the nodes in one of statuses last
// said hello to, each once.
func (s *Store) NodeReplicas(ctx context.Context, statuses ...string) ([]string, error) {
	q := `SELECT DISTINCT replica FROM nodes WHERE replica != ''`
	args := []any{}
	if len(statuses) > 0 {
		q += ` AND status IN (` + placeholders(len(statuses)) + `)`
		for _, st := range statuses {
			args = append(args, st)
		}
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY replica`, args...)
	if err != nil {
		return nil, fmt.Errorf("list the replicas of nodes: %w", classify(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, fmt.Errorf("list the replicas of nodes: %w", classify(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the replicas of nodes: %w", classify(err))
	}
	return out, nil
}

// StaleNodes lists the nodes in one of statuses (any status if none are
// given) whose last heartbeat is before cutoff. A node that has never sent
// one counts from its registration, so a node is not stale the moment it
// registers.
func (s *Store) StaleNodes(ctx context.Context, cutoff time.Time, statuses ...string) ([]store.Node, error) {
	where := []string{`COALESCE(last_heartbeat, registered_at) < ?`}
	args := []any{cutoff.UnixNano()}
	if len(statuses) > 0 {
		where = append(where, `status IN (`+placeholders(len(statuses))+`)`)
		for _, st := range statuses {
			args = append(args, st)
		}
	}
	nodes, err := s.queryNodes(ctx, where, args, store.Page{})
	if err != nil {
		return nil, fmt.Errorf("stale nodes: %w", err)
	}
	return nodes, nil
}

func (s *Store) queryNodes(ctx context.Context, where []string, args []any, p store.Page) ([]store.Node, error) {
	q := `SELECT ` + nodeColumns + ` FROM nodes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY name, id`
	lim, args := limitClause(p, args)
	q += lim
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
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
	return nodes, rows.Err()
}

// UpdateNode applies fn to the node inside one write transaction. fn runs
// while the store's only writer connection is held: it must not call the
// store.
func (s *Store) UpdateNode(ctx context.Context, id string, fn func(*store.Node) error) (store.Node, error) {
	var out store.Node
	err := s.write(ctx, func(tx *sql.Tx) error {
		n, err := getNode(ctx, tx, id)
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
		out, err = getNode(ctx, tx, id)
		return err
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("update node %s: %w", id, err)
	}
	return out, nil
}

// RecordHeartbeats stores a batch of heartbeats in one transaction, with
// the suite each agent reports working on; it revives suspect nodes but
// never offline ones (see store.Nodes). A heartbeat older than the one
// stored is ignored, so batches that arrive out
// of order cannot move a node back in time. A zero At means now.
func (s *Store) RecordHeartbeats(ctx context.Context, hbs []store.Heartbeat) error {
	if len(hbs) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		// A beat older than a node's suspicion (batched beats arrive up to
		// a flush late) must not clear it: the suspicion may be about the
		// very connection that sent the beat.
		stmt, err := tx.PrepareContext(ctx, `UPDATE nodes SET
				last_heartbeat = ?1,
				agent_state = CASE WHEN status = ?6 THEN agent_state ELSE ?2 END,
				current_suite = CASE WHEN status = ?6 THEN current_suite ELSE ?7 END,
				status = CASE WHEN status = ?6 OR (status = ?8 AND ?1 < updated_at) THEN status ELSE ?3 END,
				status_reason = CASE WHEN status = ?6 OR (status = ?8 AND ?1 < updated_at) THEN status_reason ELSE '' END,
				updated_at = CASE WHEN status IN (?3, ?6) OR (status = ?8 AND ?1 < updated_at) THEN updated_at ELSE ?4 END
			WHERE id = ?5 AND (last_heartbeat IS NULL OR last_heartbeat <= ?1)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		now := s.now()
		for _, hb := range hbs {
			at := sqlrow.OrNow(hb.At, now)
			if _, err := stmt.ExecContext(ctx, at.UnixNano(), hb.AgentState, api.StatusOnline, now.UnixNano(), hb.NodeID, api.StatusOffline, hb.SuiteID, api.StatusSuspect); err != nil {
				return classify(err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record %d heartbeats: %w", len(hbs), err)
	}
	return nil
}

// SetNodeStatus moves a node to status, if its current status is one of
// onlyIf (any, if none are given).
func (s *Store) SetNodeStatus(ctx context.Context, id, status, reason string, onlyIf ...string) (changed bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		q := `UPDATE nodes SET status = ?, status_reason = ?, updated_at = ? WHERE id = ?`
		if status == api.StatusOffline {
			// An offline node runs no agent: it has no state and no suite.
			q = `UPDATE nodes SET status = ?, status_reason = ?, updated_at = ?, agent_state = '', current_suite = '' WHERE id = ?`
		}
		args := []any{status, reason, s.now().UnixNano(), id}
		if len(onlyIf) > 0 {
			q += ` AND status IN (` + placeholders(len(onlyIf)) + `)`
			for _, st := range onlyIf {
				args = append(args, st)
			}
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return classify(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n > 0 {
			changed = true
			return nil
		}
		return nodeExists(ctx, tx, id)
	})
	if err != nil {
		return false, fmt.Errorf("set node %s status %s: %w", id, status, err)
	}
	return changed, nil
}

// DeleteNode removes a node; its notifications and credentials go with it
// (ON DELETE CASCADE).
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE id = ?`, id)
		if err != nil {
			return classify(err)
		}
		if err := mustAffect(res); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM containers WHERE node_id = ?`, id)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("delete node %s: %w", id, err)
	}
	return nil
}

func insertNode(ctx context.Context, tx *sql.Tx, n store.Node) error {
	args, err := sqlrow.NodeArgs(n)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO nodes (`+nodeColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		append([]any{n.ID}, args...)...)
	if isUnique(err) {
		return errdefs.Conflict("node id %s is taken", n.ID)
	}
	return classify(err)
}

func updateNode(ctx context.Context, tx *sql.Tx, n store.Node) error {
	args, err := sqlrow.NodeArgs(n)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE nodes SET
			name = ?, machine_id = ?, data_dir = ?, tags = ?, labels = ?, group_names = ?,
			hardware = ?, status = ?, status_reason = ?, agent_state = ?, agent_version = ?,
			current_suite = ?, last_heartbeat = ?, registered_at = ?, updated_at = ?, replica = ?
		WHERE id = ?`,
		append(args, n.ID)...)
	if isUnique(err) {
		return errdefs.Conflict("machine %s already has a node for data dir %s", n.MachineID, n.DataDir)
	}
	return classify(err)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanNode reads a row of nodeColumns. A missing row is errdefs.ErrNotFound.
func scanNode(row scanner) (store.Node, error) {
	var (
		n                        store.Node
		tags, labels, groups, hw string
		lastHeartbeat            sql.NullInt64
		registeredAt, updatedAt  int64
	)
	err := row.Scan(&n.ID, &n.Name, &n.MachineID, &n.DataDir, &tags, &labels, &groups, &hw,
		&n.Status, &n.StatusReason, &n.AgentState, &n.AgentVersion, &n.CurrentSuite,
		&lastHeartbeat, &registeredAt, &updatedAt, &n.Replica)
	if errors.Is(err, sql.ErrNoRows) {
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
	err := q.QueryRowContext(ctx, `SELECT 1 FROM nodes WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	return classify(err)
}

// mustAffect is errdefs.ErrNotFound if res changed no row.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errdefs.ErrNotFound
	}
	return nil
}

// placeholders is "?, ?, ..." for n arguments.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
