package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
	now := s.now()
	d.CreatedAt, d.UpdatedAt = sqlrow.OrNow(d.CreatedAt, now), now
	err := s.write(ctx, func(tx *sql.Tx) error {
		return insertDeployment(ctx, tx, d)
	})
	if err != nil {
		return fmt.Errorf("create deployment %s: %w", d.Name, err)
	}
	return nil
}

func insertDeployment(ctx context.Context, tx *sql.Tx, d store.Deployment) error {
	executors, extra, labels, err := sqlrow.DeploymentJSON(d)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO deployments (`+deploymentColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		d.ID, d.Provider, d.ResourceID, d.Name, d.Template, d.State, d.StateReason, d.Address,
		executors, extra, labels, d.NodeID, d.CreatedAt.UnixNano(), d.UpdatedAt.UnixNano(), d.MachineID)
	if isUnique(err) {
		return errdefs.Conflict("a live %s deployment is already named %s", d.Provider, d.Name)
	}
	return classify(err)
}

// GetDeployment reads one deployment.
func (s *Store) GetDeployment(ctx context.Context, id string) (store.Deployment, error) {
	d, err := scanDeployment(s.r.QueryRowContext(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE id = ?`, id))
	if err != nil {
		return d, fmt.Errorf("get deployment %s: %w", id, err)
	}
	return d, nil
}

// ListDeployments lists deployments, oldest first.
func (s *Store) ListDeployments(ctx context.Context, f store.DeploymentFilter) ([]store.Deployment, error) {
	q := `SELECT ` + deploymentColumns + ` FROM deployments WHERE 1=1`
	var args []any
	if f.Provider != "" {
		q += ` AND provider = ?`
		args = append(args, f.Provider)
	}
	if len(f.States) > 0 {
		q += ` AND state IN (` + strings.TrimSuffix(strings.Repeat("?,", len(f.States)), ",") + `)`
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.NodeID != "" {
		q += ` AND node_id = ?`
		args = append(args, f.NodeID)
	}
	if f.After != "" {
		var created int64
		var id string
		if err := store.DecodeCursor(f.After, &created, &id); err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		q += ` AND (created_at, id) > (?, ?)`
		args = append(args, created, id)
	}
	lim, args := limitClause(f.Page, args)
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY created_at, id`+lim, args...)
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", classify(err))
	}
	defer rows.Close()
	out := []store.Deployment{}
	for rows.Next() {
		d, err := scanDeployment(rows)
		if err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// UpdateDeployment applies fn to a deployment in one transaction.
func (s *Store) UpdateDeployment(ctx context.Context, id string, fn func(*store.Deployment) error) (store.Deployment, error) {
	var d store.Deployment
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		d, err = scanDeployment(tx.QueryRowContext(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE id = ?`, id))
		if err != nil {
			return err
		}
		if err := fn(&d); err != nil {
			return err
		}
		if d.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		d.UpdatedAt = s.now()
		if _, err := tx.ExecContext(ctx, `DELETE FROM deployments WHERE id = ?`, id); err != nil {
			return classify(err)
		}
		return insertDeployment(ctx, tx, d)
	})
	if err != nil {
		return d, fmt.Errorf("update deployment %s: %w", id, err)
	}
	return d, nil
}

// LinkDeploymentNode records the node whose agent runs on the machine.
func (s *Store) LinkDeploymentNode(ctx context.Context, deploymentID, nodeID string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE deployments SET node_id = ?, updated_at = ? WHERE id = ?`,
			nodeID, s.now().UnixNano(), deploymentID)
		if err != nil {
			return classify(err)
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("link deployment %s to node %s: %w", deploymentID, nodeID, err)
	}
	return nil
}

// DeleteDeployment forgets a deployment.
func (s *Store) DeleteDeployment(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM deployments WHERE id = ?`, id)
		if err != nil {
			return classify(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errdefs.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete deployment %s: %w", id, err)
	}
	return nil
}

func scanDeployment(row scanner) (store.Deployment, error) {
	var d store.Deployment
	var executors, extra, labels string
	var created, updated int64
	err := row.Scan(&d.ID, &d.Provider, &d.ResourceID, &d.Name, &d.Template, &d.State, &d.StateReason,
		&d.Address, &executors, &extra, &labels, &d.NodeID, &created, &updated, &d.MachineID)
	if errors.Is(err, sql.ErrNoRows) {
		return d, errdefs.ErrNotFound
	}
	if err != nil {
		return d, classify(err)
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
	d.CreatedAt, d.UpdatedAt = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
	return d, nil
}
