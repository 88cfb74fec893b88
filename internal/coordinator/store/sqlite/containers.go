package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// PutContainers records a node's container reports in one transaction.
func (s *Store) PutContainers(ctx context.Context, nodeID string, cs []api.Container) error {
	if nodeID == "" {
		return fmt.Errorf("put containers: %w", errdefs.Field("node", "required"))
	}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i, c := range cs {
			if c.Job.ID == "" || c.Status == "" {
				return errdefs.Field(fmt.Sprintf("containers[%d]", i), "job id and status are required")
			}
			c.Node = nodeID
			rec, err := json.Marshal(c)
			if err != nil {
				return errdefs.Field(fmt.Sprintf("containers[%d]", i), "cannot be stored: %v", err)
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO containers (node_id, id, status, live, record, created_at, updated_at)
				VALUES (?,?,?,?,?,?,?)
				ON CONFLICT (node_id, id) DO UPDATE SET status = excluded.status, live = excluded.live,
					record = excluded.record, created_at = excluded.created_at, updated_at = excluded.updated_at`,
				nodeID, c.Job.ID, c.Status, !api.ContainerFinal(c.Status), string(rec), c.CreatedAt.UnixNano(), now)
			if err != nil {
				return classify(err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put containers of node %s: %w", nodeID, err)
	}
	return nil
}

// ListContainers lists container reports by node, then creation.
func (s *Store) ListContainers(ctx context.Context, f store.ContainerFilter) ([]api.Container, error) {
	q := `SELECT record FROM containers WHERE 1=1`
	var args []any
	if f.NodeID != "" {
		q += ` AND node_id = ?`
		args = append(args, f.NodeID)
	}
	if f.Live {
		q += ` AND live`
	}
	if f.After != "" {
		var node, id string
		var created int64
		if err := store.DecodeCursor(f.After, &node, &created, &id); err != nil {
			return nil, fmt.Errorf("list containers: %w", err)
		}
		q += ` AND (node_id, created_at, id) > (?, ?, ?)`
		args = append(args, node, created, id)
	}
	lim, args := limitClause(f.Page, args)
	out, err := s.containers(ctx, q+` ORDER BY node_id, created_at, id`+lim, args...)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	return out, nil
}

// FindContainer returns job id's reports, live ones first.
func (s *Store) FindContainer(ctx context.Context, id string) ([]api.Container, error) {
	out, err := s.containers(ctx, `SELECT record FROM containers WHERE id = ? ORDER BY live DESC, updated_at DESC`, id)
	if err != nil {
		return nil, fmt.Errorf("find container %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, errdefs.NotFound("container %s (see nodemgr container ls)", id)
	}
	return out, nil
}

func (s *Store) containers(ctx context.Context, q string, args ...any) ([]api.Container, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	out := []api.Container{}
	for rows.Next() {
		var rec string
		if err := rows.Scan(&rec); err != nil {
			return nil, classify(err)
		}
		var c api.Container
		if err := json.Unmarshal([]byte(rec), &c); err != nil {
			return nil, fmt.Errorf("decode container record: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteContainer forgets one report.
func (s *Store) DeleteContainer(ctx context.Context, nodeID, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM containers WHERE node_id = ? AND id = ?`, nodeID, id)
		if err != nil {
			return classify(err)
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete container %s on node %s: %w", id, nodeID, err)
	}
	return nil
}
