package sqlstore

import (
	"context"
	"encoding/json"
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
	if n.ID == "" {
		return store.Node{}, fmt.Errorf("create node for machine %s, data dir %s: %w", n.MachineID, n.DataDir, errdefs.Field("id", "required"))
	}
	var out store.Node
	err := s.d.Write(ctx, func(tx Querier) error {
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
	err := s.d.Write(ctx, func(tx Querier) error {
		if _, tokenErr = s.useJoinToken(ctx, tx, tokenID, now); tokenErr != nil {
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
func (s *Store) createNode(ctx context.Context, tx Querier, n store.Node) (store.Node, error) {
	var existing string
	err := tx.QueryRow(ctx, `SELECT id FROM nodes WHERE machine_id = $1 AND data_dir = $2`,
		n.MachineID, n.DataDir).Scan(&existing)
	switch {
	case err == nil:
		return store.Node{}, fmt.Errorf("node %s is registered for this machine and data dir: %w", existing, errdefs.ErrConflict)
	case !s.d.NoRows(err):
		return store.Node{}, err
	}
	now := s.d.Now()
	n.RegisteredAt = sqlrow.OrNow(n.RegisteredAt, now)
	n.UpdatedAt = now
	if err := s.insertNode(ctx, tx, n); err != nil {
		return store.Node{}, err
	}
	return s.getNode(ctx, tx, n.ID, "")
}

// GetNode returns the node with the given ID.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := s.getNode(ctx, s.d.Reader(), id, "")
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %s: %w", id, err)
	}
	return n, nil
}

// getNode reads a node; lock is "" or a locking clause (FOR UPDATE).
func (s *Store) getNode(ctx context.Context, q Querier, id, lock string) (store.Node, error) {
	if lock != "" {
		lock = s.d.Lock(lock)
	}
	return s.scanNode(q.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = $1`+lock, id))
}

// ListNodes returns the nodes that match f, ordered by name and then ID.
func (s *Store) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	var where []string
	var a args
	if f.Status != "" {
		where = append(where, `status = `+a.add(f.Status))
	}
	if len(f.Groups) > 0 {
		where = append(where, s.d.InJSONArray(`nodes.group_names`, a.add(s.d.TextList(f.Groups))))
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

// NodesRevision reads node_revision, which the database's triggers move
// on every write that adds, removes or redescribes a node (migration 00027).
func (s *Store) NodesRevision(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.d.Reader().QueryRow(ctx, `SELECT rev FROM node_revision WHERE id = 1`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read the nodes' revision: %w", s.d.Classify(err))
	}
	return rev, nil
}

// HeldTasks sums the held tasks of the online nodes on each suite.
func (s *Store) HeldTasks(ctx context.Context, suiteIDs []string) (map[string]int, error) {
	out := map[string]int{}
	if len(suiteIDs) == 0 {
		return out, nil
	}
	rows, err := s.d.Reader().Query(ctx, `SELECT current_suite, SUM(held) FROM nodes
		WHERE `+s.d.In(`current_suite`, `$1`)+` AND status = $2 AND held > 0 GROUP BY current_suite`,
		s.d.TextList(suiteIDs), api.StatusOnline)
	if err != nil {
		return nil, fmt.Errorf("count held tasks: %w", s.d.Classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("count held tasks: %w", s.d.Classify(err))
		}
		out[id] = int(n)
	}
	return out, s.d.Classify(rows.Err())
}

// NodeReplicas lists the replicas that the nodes in one of statuses last
// said hello to, each once.
func (s *Store) NodeReplicas(ctx context.Context, statuses ...string) ([]string, error) {
	var a args
	q := `SELECT DISTINCT replica FROM nodes WHERE replica != ''`
	if len(statuses) > 0 {
		q += ` AND status IN ` + list(&a, statuses)
	}
	rows, err := s.d.Reader().Query(ctx, q+` ORDER BY replica`, a...)
	if err != nil {
		return nil, fmt.Errorf("list the replicas of nodes: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, fmt.Errorf("list the replicas of nodes: %w", s.d.Classify(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the replicas of nodes: %w", s.d.Classify(err))
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
		where = append(where, `status IN `+list(&a, statuses))
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
	rows, err := s.d.Reader().Query(ctx, q, a...)
	if err != nil {
		return nil, s.d.Classify(err)
	}
	defer rows.Close()
	nodes := []store.Node{}
	for rows.Next() {
		n, err := s.scanNode(rows)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, s.d.Classify(rows.Err())
}

// UpdateNode applies fn to the node inside one transaction, with the
// node's row locked until it commits: fn must not write the node through
// the store, which would wait for that lock forever. If the database aborts
// the transaction to break a deadlock, fn runs again on the node as it is
// then.
func (s *Store) UpdateNode(ctx context.Context, id string, fn func(*store.Node) error) (store.Node, error) {
	var out store.Node
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := s.getNode(ctx, tx, id, "FOR UPDATE")
		if err != nil {
			return err
		}
		if err := fn(&n); err != nil {
			return err
		}
		if n.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		n.UpdatedAt = s.d.Now()
		if err := s.updateNode(ctx, tx, n); err != nil {
			return err
		}
		out, err = s.getNode(ctx, tx, id, "")
		return err
	})
	if err != nil {
		return store.Node{}, fmt.Errorf("update node %s: %w", id, err)
	}
	return out, nil
}

// SetNodeStatus moves a node to status, if its current status is one of
// onlyIf (any, if none are given).
func (s *Store) SetNodeStatus(ctx context.Context, id, status, reason string, onlyIf ...string) (changed bool, err error) {
	err = s.d.Write(ctx, func(tx Querier) error {
		a := args{status, reason, s.d.Now().UnixNano(), id}
		q := `UPDATE nodes SET status = $1, status_reason = $2, updated_at = $3 WHERE id = $4`
		if status == api.StatusOffline {
			// An offline node runs no agent: it has no state and no suite.
			q = `UPDATE nodes SET status = $1, status_reason = $2, updated_at = $3, agent_state = '', current_suite = '' WHERE id = $4`
		}
		if len(onlyIf) > 0 {
			q += ` AND status IN ` + list(&a, onlyIf)
		}
		n, err := tx.Exec(ctx, q, a...)
		if err != nil {
			return err
		}
		if changed = n > 0; changed {
			return nil
		}
		return s.nodeExists(ctx, tx, id)
	})
	if err != nil {
		return false, fmt.Errorf("set node %s status %s: %w", id, status, err)
	}
	return changed, nil
}

// DeleteNode removes a node; its notifications, credentials and problems
// go with it (ON DELETE CASCADE), and its container reports.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if err := mustAffect(n); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM containers WHERE node_id = $1`, id)
		return err
	})
	s.auth.Changed() // its credentials went with it
	if err != nil {
		return fmt.Errorf("delete node %s: %w", id, err)
	}
	return nil
}

func (s *Store) insertNode(ctx context.Context, tx Querier, n store.Node) error {
	a, err := sqlrow.NodeArgs(n)
	if err != nil {
		return err
	}
	// A clash on the ID inserts nothing, which tells it apart from a
	// clash on another key (SQLite's errors do not name the constraint).
	added, err := tx.Exec(ctx, `INSERT INTO nodes (`+nodeColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
		ON CONFLICT (id) DO NOTHING`,
		append([]any{n.ID}, a...)...)
	switch {
	case s.d.IsUnique(err):
		return errdefs.Conflict("machine %s already has a node for data dir %s", n.MachineID, n.DataDir)
	case err != nil:
		return err
	case added == 0:
		return errdefs.Conflict("node id %s is taken", n.ID)
	}
	return nil
}

func (s *Store) updateNode(ctx context.Context, tx Querier, n store.Node) error {
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
	if s.d.IsUnique(err) {
		return errdefs.Conflict("machine %s already has a node for data dir %s", n.MachineID, n.DataDir)
	}
	return err
}

// scanNode reads a row of nodeColumns. A missing row is errdefs.ErrNotFound.
func (s *Store) scanNode(row Row) (store.Node, error) {
	var (
		n                        store.Node
		tags, labels, groups, hw string
		lastHeartbeat            *int64
		registeredAt, updatedAt  int64
	)
	err := row.Scan(&n.ID, &n.Name, &n.MachineID, &n.DataDir, &tags, &labels, &groups, &hw,
		&n.Status, &n.StatusReason, &n.AgentState, &n.AgentVersion, &n.CurrentSuite,
		&lastHeartbeat, &registeredAt, &updatedAt, &n.Replica)
	if s.d.NoRows(err) {
		return store.Node{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Node{}, s.d.Classify(err)
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
	n.LastHeartbeat = sqlrow.TimeOf(lastHeartbeat)
	n.RegisteredAt = sqlrow.FromNanos(registeredAt)
	n.UpdatedAt = sqlrow.FromNanos(updatedAt)
	return n, nil
}

// nodeExists is nil if the node exists and errdefs.ErrNotFound if not.
func (s *Store) nodeExists(ctx context.Context, q Querier, id string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM nodes WHERE id = $1`, id).Scan(&one)
	if s.d.NoRows(err) {
		return errdefs.ErrNotFound
	}
	return s.d.Classify(err)
}
