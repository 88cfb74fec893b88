package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const deploymentColumns = `id, provider, resource_id, name, template, state, state_reason, address, executors, extra, labels, node_id, created_at, updated_at, machine_id`

// CreateDeployment stores a new deployment.
func (s *Store) CreateDeployment(ctx context.Context, d store.Deployment) error {
	if d.ID == "" || d.Provider == "" || d.Name == "" || d.State == "" {
		return fmt.Errorf("create deployment: %w", errdefs.Field("deployment", "id, provider, name and state are required"))
	}
	now := s.d.Now()
	d.CreatedAt, d.UpdatedAt = sqlrow.OrNow(d.CreatedAt, now), now
	err := s.d.Write(ctx, func(tx Querier) error {
		return s.insertDeployment(ctx, tx, d)
	})
	if err != nil {
		return fmt.Errorf("create deployment %s: %w", d.Name, err)
	}
	return nil
}

func (s *Store) insertDeployment(ctx context.Context, tx Querier, d store.Deployment) error {
	executors, extra, labels, err := sqlrow.DeploymentJSON(d)
	if err != nil {
		return err
	}
	// A clash on the ID inserts nothing, which tells it apart from a
	// clash on the name (SQLite's errors do not name the constraint).
	added, err := tx.Exec(ctx, `INSERT INTO deployments (`+deploymentColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
		ON CONFLICT (id) DO NOTHING`,
		d.ID, d.Provider, d.ResourceID, d.Name, d.Template, d.State, d.StateReason, d.Address,
		executors, extra, labels, d.NodeID, d.CreatedAt.UnixNano(), d.UpdatedAt.UnixNano(), d.MachineID)
	switch {
	case s.d.IsUnique(err):
		return errdefs.Conflict("a live %s deployment is already named %s", d.Provider, d.Name)
	case err != nil:
		return err
	case added == 0:
		return errdefs.Conflict("deployment id %s is taken", d.ID)
	}
	return nil
}

// GetDeployment reads one deployment.
func (s *Store) GetDeployment(ctx context.Context, id string) (store.Deployment, error) {
	d, err := s.scanDeployment(s.d.Reader().QueryRow(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE id = $1`, id))
	if err != nil {
		return d, fmt.Errorf("get deployment %s: %w", id, err)
	}
	return d, nil
}

// ListDeployments lists deployments, oldest first.
func (s *Store) ListDeployments(ctx context.Context, f store.DeploymentFilter) ([]store.Deployment, error) {
	var where []string
	var a args
	if f.Provider != "" {
		where = append(where, `provider = `+a.add(f.Provider))
	}
	if len(f.States) > 0 {
		where = append(where, `state IN `+list(&a, f.States))
	}
	if f.NodeID != "" {
		where = append(where, `node_id = `+a.add(f.NodeID))
	}
	if f.After != "" {
		var created int64
		var id string
		if err := store.DecodeCursor(f.After, &created, &id); err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		where = append(where, `(created_at, id) > (`+a.add(created)+`, `+a.add(id)+`)`)
	}
	q := `SELECT ` + deploymentColumns + ` FROM deployments`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := s.d.Reader().Query(ctx, q+` ORDER BY created_at, id`+a.limit(f.Page), a...)
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", s.d.Classify(err))
	}
	defer rows.Close()
	out := []store.Deployment{}
	for rows.Next() {
		d, err := s.scanDeployment(rows)
		if err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deployments: %w", s.d.Classify(err))
	}
	return out, nil
}

// UpdateDeployment applies fn to a deployment in one transaction, with its
// row locked. fn may run again if the database aborts the transaction to
// break a deadlock.
func (s *Store) UpdateDeployment(ctx context.Context, id string, fn func(*store.Deployment) error) (store.Deployment, error) {
	var d store.Deployment
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		d, err = s.scanDeployment(tx.QueryRow(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE id = $1`+s.d.Lock("FOR UPDATE"), id))
		if err != nil {
			return err
		}
		if err := fn(&d); err != nil {
			return err
		}
		if d.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		d.UpdatedAt = s.d.Now()
		executors, extra, labels, err := sqlrow.DeploymentJSON(d)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE deployments SET provider = $2, resource_id = $3, name = $4, template = $5,
				state = $6, state_reason = $7, address = $8, executors = $9, extra = $10, labels = $11,
				node_id = $12, created_at = $13, updated_at = $14, machine_id = $15
			WHERE id = $1`,
			d.ID, d.Provider, d.ResourceID, d.Name, d.Template, d.State, d.StateReason, d.Address,
			executors, extra, labels, d.NodeID, d.CreatedAt.UnixNano(), d.UpdatedAt.UnixNano(), d.MachineID)
		if s.d.IsUnique(err) {
			return errdefs.Conflict("a live %s deployment is already named %s", d.Provider, d.Name)
		}
		return err
	})
	if err != nil {
		return d, fmt.Errorf("update deployment %s: %w", id, err)
	}
	return d, nil
}

// LinkDeploymentNode records the node whose agent runs on the machine.
func (s *Store) LinkDeploymentNode(ctx context.Context, deploymentID, nodeID string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `UPDATE deployments SET node_id = $1, updated_at = $2 WHERE id = $3`,
			nodeID, s.d.Now().UnixNano(), deploymentID)
		if err != nil {
			return err
		}
		return mustAffect(n)
	})
	if err != nil {
		return fmt.Errorf("link deployment %s to node %s: %w", deploymentID, nodeID, err)
	}
	return nil
}

// DeleteDeployment forgets a deployment.
func (s *Store) DeleteDeployment(ctx context.Context, id string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM deployments WHERE id = $1`, id)
		if err != nil {
			return err
		}
		return mustAffect(n)
	})
	if err != nil {
		return fmt.Errorf("delete deployment %s: %w", id, err)
	}
	return nil
}

func (s *Store) scanDeployment(row Row) (store.Deployment, error) {
	var d store.Deployment
	var executors, extra, labels string
	var created, updated int64
	err := row.Scan(&d.ID, &d.Provider, &d.ResourceID, &d.Name, &d.Template, &d.State, &d.StateReason,
		&d.Address, &executors, &extra, &labels, &d.NodeID, &created, &updated, &d.MachineID)
	if s.d.NoRows(err) {
		return d, errdefs.ErrNotFound
	}
	if err != nil {
		return d, s.d.Classify(err)
	}
	if err := errors.Join(json.Unmarshal([]byte(executors), &d.Executors), json.Unmarshal([]byte(extra), &d.Extra),
		json.Unmarshal([]byte(labels), &d.Labels)); err != nil {
		return d, fmt.Errorf("decode deployment %s: %w", d.ID, err)
	}
	if d.Executors == nil {
		d.Executors = []string{}
	}
	if d.Extra == nil {
		d.Extra = map[string]any{}
	}
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	d.CreatedAt, d.UpdatedAt = sqlrow.FromNanos(created), sqlrow.FromNanos(updated)
	return d, nil
}
