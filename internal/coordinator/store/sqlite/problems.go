package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// PutSuiteProblem records the latest problem of (suite, node).
func (s *Store) PutSuiteProblem(ctx context.Context, suiteID string, p api.SuiteProblem) error {
	if suiteID == "" || p.NodeID == "" {
		return fmt.Errorf("put suite problem: %w", errdefs.Field("node_id", "suite and node are required"))
	}
	at := sqlrow.OrNow(p.At, s.now())
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO suite_problems (suite_id, node_id, stage, exit_code, reason, output_tail, at)
			VALUES (?,?,?,?,?,?,?)
			ON CONFLICT (suite_id, node_id) DO UPDATE SET stage = excluded.stage, exit_code = excluded.exit_code,
				reason = excluded.reason, output_tail = excluded.output_tail, at = excluded.at`,
			suiteID, p.NodeID, p.Stage, p.ExitCode, p.Reason, p.OutputTail, at.UnixNano())
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("put problem of suite %s on node %s: %w", suiteID, p.NodeID, err)
	}
	return nil
}

// SuiteProblems lists problems by suite, node or both, newest first.
func (s *Store) SuiteProblems(ctx context.Context, suiteID, nodeID string) ([]store.SuiteProblem, error) {
	q := `SELECT p.suite_id, p.node_id, n.name, p.stage, p.exit_code, p.reason, p.output_tail, p.at
		FROM suite_problems p JOIN nodes n ON n.id = p.node_id WHERE 1=1`
	var args []any
	if suiteID != "" {
		q += ` AND p.suite_id = ?`
		args = append(args, suiteID)
	}
	if nodeID != "" {
		q += ` AND p.node_id = ?`
		args = append(args, nodeID)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY p.at DESC, p.node_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list suite problems: %w", classify(err))
	}
	defer rows.Close()
	out := []store.SuiteProblem{}
	for rows.Next() {
		var p store.SuiteProblem
		var at int64
		if err := rows.Scan(&p.SuiteID, &p.NodeID, &p.NodeName, &p.Stage, &p.ExitCode, &p.Reason, &p.OutputTail, &at); err != nil {
			return nil, fmt.Errorf("list suite problems: %w", classify(err))
		}
		p.At = sqlrow.FromNanos(at)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list suite problems: %w", classify(err))
	}
	return out, nil
}

// ClearSuiteProblem forgets the problem of (suite, node); none is fine.
func (s *Store) ClearSuiteProblem(ctx context.Context, suiteID, nodeID string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM suite_problems WHERE suite_id = ? AND node_id = ?`, suiteID, nodeID)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("clear problem of suite %s on node %s: %w", suiteID, nodeID, err)
	}
	return nil
}

// probePad is the size of the probe's write: a page's worth, so that it
// needs room in the WAL as any real write does.
const probePad = 4096

// Probe rewrites the health row in a transaction of its own.
func (s *Store) Probe(ctx context.Context) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO health_probe (id, at, pad) VALUES (1, ?, zeroblob(?))
			ON CONFLICT (id) DO UPDATE SET at = excluded.at, pad = excluded.pad`, s.now().UnixNano(), probePad)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("probe store: %w", err)
	}
	return nil
}
