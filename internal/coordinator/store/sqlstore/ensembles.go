package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const ensembleColumns = `id, name, spec, state, reason, owner, replicas, lost, created_at, updated_at`

// CreateEnsemble stores a new ensemble; a zero CreatedAt means now.
func (s *Store) CreateEnsemble(ctx context.Context, e api.Ensemble) error {
	if e.ID == "" || e.Name == "" {
		return fmt.Errorf("create ensemble: %w", errdefs.Field("id", "ID and name are required"))
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		now := s.d.Now()
		e.CreatedAt = sqlrow.OrNow(e.CreatedAt, now)
		e.UpdatedAt = now
		a, err := sqlrow.EnsembleArgs(e)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO ensembles (`+ensembleColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, a...)
		if s.d.IsUnique(err) {
			return errdefs.Conflict("an ensemble named %s is deployed already; shut it down first or choose another name", e.Name)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create ensemble %s: %w", e.Name, err)
	}
	return nil
}

// GetEnsemble finds an ensemble by ID, or else the newest of that name.
func (s *Store) GetEnsemble(ctx context.Context, ref string) (api.Ensemble, error) {
	e, err := s.scanEnsemble(s.d.Reader().QueryRow(ctx, `SELECT `+ensembleColumns+` FROM ensembles
		WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC, created_at DESC LIMIT 1`, ref))
	if err != nil {
		return api.Ensemble{}, fmt.Errorf("get ensemble %s: %w", ref, err)
	}
	return e, nil
}

// ListEnsembles lists ensembles newest first; live ones only unless all.
func (s *Store) ListEnsembles(ctx context.Context, all bool) ([]api.Ensemble, error) {
	q := `SELECT ` + ensembleColumns + ` FROM ensembles`
	if !all {
		q += ` WHERE state NOT IN ('` + api.EnsembleShutDown + `', '` + api.EnsembleFailed + `')`
	}
	rows, err := s.d.Reader().Query(ctx, q+` ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list ensembles: %w", s.d.Classify(err))
	}
	defer rows.Close()
	out := []api.Ensemble{}
	for rows.Next() {
		e, err := s.scanEnsemble(rows)
		if err != nil {
			return nil, fmt.Errorf("list ensembles: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list ensembles: %w", s.d.Classify(err))
	}
	return out, nil
}

// UpdateEnsemble applies fn to the ensemble inside one transaction, with
// its row locked. fn may run again if the database aborts the transaction
// to break a deadlock.
func (s *Store) UpdateEnsemble(ctx context.Context, id string, fn func(*api.Ensemble) error) (api.Ensemble, error) {
	var out api.Ensemble
	err := s.d.Write(ctx, func(tx Querier) error {
		e, err := s.scanEnsemble(tx.QueryRow(ctx, `SELECT `+ensembleColumns+` FROM ensembles WHERE id = $1`+s.d.Lock("FOR UPDATE"), id))
		if err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
		e.ID, e.UpdatedAt = id, s.d.Now()
		a, err := sqlrow.EnsembleArgs(e)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE ensembles SET name = $2, spec = $3, state = $4, reason = $5, owner = $6,
			replicas = $7, lost = $8, created_at = $9, updated_at = $10 WHERE id = $1`, a...)
		if s.d.IsUnique(err) {
			return errdefs.Conflict("another live ensemble is named %s", e.Name)
		}
		out = e
		return err
	})
	if err != nil {
		return api.Ensemble{}, fmt.Errorf("update ensemble %s: %w", id, err)
	}
	return out, nil
}

func (s *Store) scanEnsemble(row Row) (api.Ensemble, error) {
	var (
		e                api.Ensemble
		spec, replicas   string
		lost             string
		created, updated int64
	)
	err := row.Scan(&e.ID, &e.Name, &spec, &e.State, &e.Reason, &e.Owner, &replicas, &lost, &created, &updated)
	if s.d.NoRows(err) {
		return api.Ensemble{}, errdefs.ErrNotFound
	}
	if err != nil {
		return api.Ensemble{}, s.d.Classify(err)
	}
	if err := json.Unmarshal([]byte(spec), &e.Spec); err != nil {
		return api.Ensemble{}, fmt.Errorf("ensemble %s spec: %w", e.ID, err)
	}
	if err := json.Unmarshal([]byte(replicas), &e.Replicas); err != nil {
		return api.Ensemble{}, fmt.Errorf("ensemble %s replicas: %w", e.ID, err)
	}
	if err := json.Unmarshal([]byte(lost), &e.Lost); err != nil {
		return api.Ensemble{}, fmt.Errorf("ensemble %s lost replicas: %w", e.ID, err)
	}
	if len(e.Lost) == 0 {
		e.Lost = nil
	}
	for _, rs := range [][]api.EnsembleReplica{e.Replicas, e.Lost} {
		for i := range rs {
			rs[i].Status = api.ContainerStatus(rs[i].Status) // stored before one casing of states
		}
	}
	e.CreatedAt, e.UpdatedAt = sqlrow.FromNanos(created), sqlrow.FromNanos(updated)
	return e, nil
}
