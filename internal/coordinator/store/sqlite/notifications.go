package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Enqueue appends a notification to a node's outbox under the node's next seq.
func (s *Store) Enqueue(ctx context.Context, nodeID, method string, body []byte) (store.Notification, error) {
	nt := store.Notification{NodeID: nodeID, Method: method, Body: append([]byte{}, body...)}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := nodeExists(ctx, tx, nodeID); err != nil {
			return err
		}
		err := tx.QueryRowContext(ctx, `INSERT INTO notification_seqs (node_id, last_seq) VALUES (?, 1)
			ON CONFLICT (node_id) DO UPDATE SET last_seq = last_seq + 1
			RETURNING last_seq`, nodeID).Scan(&nt.Seq)
		if err != nil {
			return classify(err)
		}
		now := s.now().UnixNano()
		nt.CreatedAt = sqlrow.FromNanos(now)
		_, err = tx.ExecContext(ctx, `INSERT INTO notifications (node_id, seq, method, body, created_at)
			VALUES (?, ?, ?, ?, ?)`, nodeID, nt.Seq, method, string(body), now)
		return classify(err)
	})
	if err != nil {
		return store.Notification{}, fmt.Errorf("enqueue %s for node %s: %w", method, nodeID, err)
	}
	return nt, nil
}

// Pending returns the node's unacknowledged notifications after a seq.
func (s *Store) Pending(ctx context.Context, nodeID string, after uint64) ([]store.Notification, error) {
	out, err := s.pending(ctx, nodeID, after)
	if err != nil {
		return nil, fmt.Errorf("pending notifications for node %s after %d: %w", nodeID, after, err)
	}
	return out, nil
}

func (s *Store) pending(ctx context.Context, nodeID string, after uint64) ([]store.Notification, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT seq, method, body, created_at FROM notifications
		WHERE node_id = ? AND seq > ? ORDER BY seq`, nodeID, after)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	out := []store.Notification{}
	for rows.Next() {
		nt := store.Notification{NodeID: nodeID, Body: []byte{}}
		var created int64
		var body string
		if err := rows.Scan(&nt.Seq, &nt.Method, &body, &created); err != nil {
			return nil, classify(err)
		}
		nt.Body = append(nt.Body, body...)
		nt.CreatedAt = sqlrow.FromNanos(created)
		out = append(out, nt)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	if len(out) == 0 {
		// Tell an empty outbox from a node that is not there.
		if err := nodeExists(ctx, s.r, nodeID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Ack drops the node's notifications up to and including a seq.
func (s *Store) Ack(ctx context.Context, nodeID string, upTo uint64) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM notifications WHERE node_id = ? AND seq <= ?`, nodeID, upTo)
		if err != nil {
			return classify(err)
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		// Nothing to drop: an old ack again is fine, an unknown node is not.
		return nodeExists(ctx, tx, nodeID)
	})
	if err != nil {
		return fmt.Errorf("ack notifications for node %s up to %d: %w", nodeID, upTo, err)
	}
	return nil
}
