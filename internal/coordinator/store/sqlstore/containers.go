package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// PutContainers records a node's container reports in one transaction.
func (s *Store) PutContainers(ctx context.Context, nodeID string, cs []api.Container) error {
	if nodeID == "" {
		return fmt.Errorf("put containers: %w", errdefs.Field("node", "required"))
	}
	now := s.d.Now().UnixNano()
	err := s.d.Write(ctx, func(tx Querier) error {
		for i, c := range cs {
			if c.Job.ID == "" || c.Status == "" {
				return errdefs.Field(fmt.Sprintf("containers[%d]", i), "job id and status are required")
			}
			c.Node = nodeID
			c.Status = api.ContainerStatus(c.Status) // older agents capitalize it
			rec, err := json.Marshal(c)
			if err != nil {
				return errdefs.Field(fmt.Sprintf("containers[%d]", i), "cannot be stored: %v", err)
			}
			_, err = tx.Exec(ctx, `INSERT INTO containers (node_id, id, status, live, record, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (node_id, id) DO UPDATE SET status = excluded.status, live = excluded.live,
					record = excluded.record, created_at = excluded.created_at, updated_at = excluded.updated_at`,
				nodeID, c.Job.ID, c.Status, !api.ContainerFinal(c.Status), string(rec), c.CreatedAt.UnixNano(), now)
			if err != nil {
				return err
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
	var where []string
	var a args
	if f.NodeID != "" {
		where = append(where, `node_id = `+a.add(f.NodeID))
	}
	if f.Live {
		where = append(where, `live`)
	}
	if f.After != "" {
		var node, id string
		var created int64
		if err := store.DecodeCursor(f.After, &node, &created, &id); err != nil {
			return nil, fmt.Errorf("list containers: %w", err)
		}
		where = append(where, `(node_id, created_at, id) > (`+a.add(node)+`, `+a.add(created)+`, `+a.add(id)+`)`)
	}
	q := `SELECT record FROM containers`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	out, err := s.containers(ctx, q+` ORDER BY node_id, created_at, id`+a.limit(f.Page), a...)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	return out, nil
}

// FindContainer returns job id's reports, live ones first.
func (s *Store) FindContainer(ctx context.Context, id string) ([]api.Container, error) {
	out, err := s.containers(ctx, `SELECT record FROM containers WHERE id = $1 ORDER BY live DESC, updated_at DESC`, id)
	if err != nil {
		return nil, fmt.Errorf("find container %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, errdefs.NotFound("container %s (see nodemgr container ls)", id)
	}
	return out, nil
}

func (s *Store) containers(ctx context.Context, q string, a ...any) ([]api.Container, error) {
	rows, err := s.d.Reader().Query(ctx, q, a...)
	if err != nil {
		return nil, s.d.Classify(err)
	}
	defer rows.Close()
	out := []api.Container{}
	for rows.Next() {
		var rec string
		if err := rows.Scan(&rec); err != nil {
			return nil, s.d.Classify(err)
		}
		var c api.Container
		if err := json.Unmarshal([]byte(rec), &c); err != nil {
			return nil, fmt.Errorf("decode container record: %w", err)
		}
		c.Status = api.ContainerStatus(c.Status) // a record older than one casing of states
		out = append(out, c)
	}
	return out, s.d.Classify(rows.Err())
}

// DeleteContainer forgets one report.
func (s *Store) DeleteContainer(ctx context.Context, nodeID, id string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM containers WHERE node_id = $1 AND id = $2`, nodeID, id)
		if err != nil {
			return err
		}
		return mustAffect(n)
	})
	if err != nil {
		return fmt.Errorf("delete container %s on node %s: %w", id, nodeID, err)
	}
	return nil
}
