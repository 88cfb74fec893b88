package sqlstore

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Enqueue appends a notification to a node's outbox under the node's next
// seq. The seq's row stays locked until the notification commits, so a
// node's seqs commit in order: a reader never sees seq n+1 while n may
// still appear (and be skipped by an ack of n+1).
func (s *Store) Enqueue(ctx context.Context, nodeID, method string, body []byte) (store.Notification, error) {
	nt := store.Notification{NodeID: nodeID, Method: method, Body: append([]byte{}, body...)}
	err := s.d.Write(ctx, func(tx Querier) error {
		if err := s.nodeExists(ctx, tx, nodeID); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `INSERT INTO notification_seqs AS n (node_id, last_seq) VALUES ($1, 1)
			ON CONFLICT (node_id) DO UPDATE SET last_seq = n.last_seq + 1
			RETURNING last_seq`, nodeID).Scan(&nt.Seq)
		if err != nil {
			return err
		}
		now := s.d.Now().UnixNano()
		nt.CreatedAt = sqlrow.FromNanos(now)
		// A node deleted meanwhile fails the foreign key: not found.
		_, err = tx.Exec(ctx, `INSERT INTO notifications (node_id, seq, method, body, created_at)
			VALUES ($1, $2, $3, $4, $5)`, nodeID, nt.Seq, method, nt.Body, now)
		return err
	})
	if err != nil {
		return store.Notification{}, fmt.Errorf("enqueue %s for node %s: %w", method, nodeID, err)
	}
	return nt, nil
}

// Pending returns the node's unacknowledged notifications after a seq.
func (s *Store) Pending(ctx context.Context, nodeID string, after uint64) ([]store.Notification, error) {
	var out []store.Notification
	err := s.d.Read(ctx, func(tx Querier) error {
		var err error
		out, err = s.pending(ctx, tx, nodeID, after)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pending notifications for node %s after %d: %w", nodeID, after, err)
	}
	return out, nil
}

func (s *Store) pending(ctx context.Context, tx Querier, nodeID string, after uint64) ([]store.Notification, error) {
	rows, err := tx.Query(ctx, `SELECT seq, method, body, created_at FROM notifications
		WHERE node_id = $1 AND seq > $2 ORDER BY seq`, nodeID, int64(min(after, 1<<63-1)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Notification{}
	for rows.Next() {
		nt := store.Notification{NodeID: nodeID}
		var created int64
		if err := rows.Scan(&nt.Seq, &nt.Method, &nt.Body, &created); err != nil {
			return nil, err
		}
		if nt.Body == nil {
			nt.Body = []byte{}
		}
		nt.CreatedAt = sqlrow.FromNanos(created)
		out = append(out, nt)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		// Tell an empty outbox from a node that is not there.
		if err := s.nodeExists(ctx, tx, nodeID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Ack drops the node's notifications up to and including a seq.
func (s *Store) Ack(ctx context.Context, nodeID string, upTo uint64) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM notifications WHERE node_id = $1 AND seq <= $2`, nodeID, int64(min(upTo, 1<<63-1)))
		if err != nil || n > 0 {
			return err
		}
		// Nothing to drop: an old ack again is fine, an unknown node is not.
		return s.nodeExists(ctx, tx, nodeID)
	})
	if err != nil {
		return fmt.Errorf("ack notifications for node %s up to %d: %w", nodeID, upTo, err)
	}
	return nil
}
