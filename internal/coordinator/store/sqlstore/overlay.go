package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

const overlayColumns = `node_id, block, public_key, listen_port, endpoint, kind, joined_at, updated_at`

// JoinOverlay stores a node's place on the overlay, keeping the block it has.
func (s *Store) JoinOverlay(ctx context.Context, m store.OverlayMember, blocks int) (store.OverlayMember, error) {
	var out store.OverlayMember
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		out, err = s.joinOverlay(ctx, tx, m, blocks)
		return err
	})
	if err != nil {
		return store.OverlayMember{}, fmt.Errorf("put node %s on the overlay: %w", m.NodeID, err)
	}
	return out, nil
}

func (s *Store) joinOverlay(ctx context.Context, tx Querier, m store.OverlayMember, blocks int) (store.OverlayMember, error) {
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM nodes WHERE id = $1`, m.NodeID).Scan(&one); err != nil {
		if s.d.NoRows(err) {
			return m, errdefs.NotFound("node %s", m.NodeID)
		}
		return m, err
	}
	var owner string
	err := tx.QueryRow(ctx, `SELECT node_id FROM overlay_members WHERE public_key = $1 AND node_id <> $2`, m.PublicKey, m.NodeID).Scan(&owner)
	switch {
	case err == nil:
		return m, errdefs.Conflict("node %s has this overlay key already: was a data dir copied? Remove the key file on one of them and restart its agent", owner)
	case !s.d.NoRows(err):
		return m, err
	}
	old, found, err := s.overlayMember(ctx, tx, m.NodeID)
	if err != nil {
		return m, err
	}
	now := s.d.Now()
	if found {
		m.Block, m.JoinedAt = old.Block, old.JoinedAt
		if old.PublicKey == m.PublicKey && old.ListenPort == m.ListenPort && old.Endpoint == m.Endpoint && old.Kind == m.Kind {
			return old, nil
		}
		m.UpdatedAt = now
		_, err := tx.Exec(ctx, `UPDATE overlay_members SET public_key = $2, listen_port = $3, endpoint = $4, kind = $5, updated_at = $6
			WHERE node_id = $1`, m.NodeID, m.PublicKey, m.ListenPort, m.Endpoint, m.Kind, now.UnixNano())
		return m, err
	}
	if m.Block, err = s.freeBlock(ctx, tx, blocks); err != nil {
		return m, err
	}
	m.JoinedAt, m.UpdatedAt = now, now
	_, err = tx.Exec(ctx, `INSERT INTO overlay_members (`+overlayColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`,
		m.NodeID, m.Block, m.PublicKey, m.ListenPort, m.Endpoint, m.Kind, now.UnixNano())
	return m, err
}

// freeBlock is the lowest block no node has. Two servers taking the same
// one at once clash on the unique block, and the write is run again.
func (s *Store) freeBlock(ctx context.Context, tx Querier, blocks int) (int, error) {
	rows, err := tx.Query(ctx, `SELECT block FROM overlay_members ORDER BY block`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	free := 0
	for rows.Next() {
		var b int
		if err := rows.Scan(&b); err != nil {
			return 0, err
		}
		if b != free {
			break
		}
		free++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if free >= blocks {
		return 0, errdefs.Class(fmt.Errorf("the overlay's %d blocks are all taken: give the server a larger --overlay-network or delete nodes that are gone", blocks), errdefs.ErrUnavailable)
	}
	return free, nil
}

func (s *Store) overlayMember(ctx context.Context, tx Querier, nodeID string) (store.OverlayMember, bool, error) {
	m, err := scanOverlayMember(tx.QueryRow(ctx, `SELECT `+overlayColumns+` FROM overlay_members WHERE node_id = $1`, nodeID))
	if s.d.NoRows(err) {
		return m, false, nil
	}
	return m, err == nil, err
}

// ListOverlay lists the overlay's members by block.
func (s *Store) ListOverlay(ctx context.Context) ([]store.OverlayMember, error) {
	rows, err := s.d.Reader().Query(ctx, `SELECT `+overlayColumns+` FROM overlay_members ORDER BY block`)
	if err != nil {
		return nil, fmt.Errorf("list the overlay: %w", s.d.Classify(err))
	}
	defer rows.Close()
	var out []store.OverlayMember
	for rows.Next() {
		m, err := scanOverlayMember(rows)
		if err != nil {
			return nil, fmt.Errorf("list the overlay: %w", s.d.Classify(err))
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the overlay: %w", s.d.Classify(err))
	}
	return out, nil
}

// OverlayRevision reads the overlay's revision.
func (s *Store) OverlayRevision(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.d.Reader().QueryRow(ctx, `SELECT rev FROM overlay_revision WHERE id = 1`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read the overlay's revision: %w", s.d.Classify(err))
	}
	return rev, nil
}

func scanOverlayMember(r interface{ Scan(...any) error }) (store.OverlayMember, error) {
	var m store.OverlayMember
	var joined, updated int64
	err := r.Scan(&m.NodeID, &m.Block, &m.PublicKey, &m.ListenPort, &m.Endpoint, &m.Kind, &joined, &updated)
	m.JoinedAt, m.UpdatedAt = time.Unix(0, joined).UTC(), time.Unix(0, updated).UTC()
	return m, err
}
