package sqlstore

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// PutSuiteProblem records the latest problem of (suite, node). An unknown
// suite or node fails the foreign key: not found.
func (s *Store) PutSuiteProblem(ctx context.Context, suiteID string, p api.SuiteProblem) error {
	if suiteID == "" || p.NodeID == "" {
		return fmt.Errorf("put suite problem: %w", errdefs.Field("node_id", "suite and node are required"))
	}
	at := sqlrow.OrNow(p.At, s.d.Now())
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO suite_problems (suite_id, node_id, stage, exit_code, reason, output_tail, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (suite_id, node_id) DO UPDATE SET stage = excluded.stage, exit_code = excluded.exit_code,
				reason = excluded.reason, output_tail = excluded.output_tail, at = excluded.at`,
			suiteID, p.NodeID, p.Stage, p.ExitCode, []byte(p.Reason), []byte(p.OutputTail), at.UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("put problem of suite %s on node %s: %w", suiteID, p.NodeID, err)
	}
	return nil
}

// SuiteProblems lists problems by suite, node or both, newest first.
func (s *Store) SuiteProblems(ctx context.Context, suiteID, nodeID string) ([]store.SuiteProblem, error) {
	rows, err := s.d.Reader().Query(ctx, `SELECT p.suite_id, p.node_id, n.name, p.stage, p.exit_code, p.reason, p.output_tail, p.at
		FROM suite_problems p JOIN nodes n ON n.id = p.node_id
		WHERE ($1 = '' OR p.suite_id = $1) AND ($2 = '' OR p.node_id = $2)
		ORDER BY p.at DESC, p.node_id`, suiteID, nodeID)
	if err != nil {
		return nil, fmt.Errorf("list suite problems: %w", s.d.Classify(err))
	}
	defer rows.Close()
	out := []store.SuiteProblem{}
	for rows.Next() {
		var p store.SuiteProblem
		var reason, tail []byte
		var at int64
		if err := rows.Scan(&p.SuiteID, &p.NodeID, &p.NodeName, &p.Stage, &p.ExitCode, &reason, &tail, &at); err != nil {
			return nil, fmt.Errorf("list suite problems: %w", s.d.Classify(err))
		}
		p.Reason, p.OutputTail, p.At = string(reason), string(tail), sqlrow.FromNanos(at)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list suite problems: %w", s.d.Classify(err))
	}
	return out, nil
}

// ClearSuiteProblem forgets the problem of (suite, node); none is fine.
func (s *Store) ClearSuiteProblem(ctx context.Context, suiteID, nodeID string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `DELETE FROM suite_problems WHERE suite_id = $1 AND node_id = $2`, suiteID, nodeID)
		return err
	})
	if err != nil {
		return fmt.Errorf("clear problem of suite %s on node %s: %w", suiteID, nodeID, err)
	}
	return nil
}

// probePad is the size of the probe's write: a page's worth, so that it
// needs room as any real write does.
const probePad = 4096

// Probe rewrites the health row in a transaction of its own: it fails when
// the database takes no writes (down, full, a read-only standby).
func (s *Store) Probe(ctx context.Context) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO health_probe (id, at, pad) VALUES (1, $1, $2)
			ON CONFLICT (id) DO UPDATE SET at = excluded.at, pad = excluded.pad`, s.d.Now().UnixNano(), make([]byte, probePad))
		return err
	})
	if err != nil {
		return fmt.Errorf("probe store: %w", err)
	}
	return nil
}
