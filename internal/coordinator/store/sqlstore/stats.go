package sqlstore

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
)

// CountNodes counts nodes by status, from the status index.
func (s *Store) CountNodes(ctx context.Context) (map[string]int, error) {
	out, err := s.countBy(ctx, `SELECT status, count(*) FROM nodes GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count nodes: %w", err)
	}
	return out, nil
}

// CountSuites counts suites by state, from the state index, and adds up the
// task counts kept per suite in suite_counts: no task row is read.
func (s *Store) CountSuites(ctx context.Context) (map[string]int, api.TaskCounts, error) {
	suites, err := s.countBy(ctx, `SELECT state, count(*) FROM suites GROUP BY state`)
	if err != nil {
		return nil, api.TaskCounts{}, fmt.Errorf("count suites: %w", err)
	}
	var c api.TaskCounts
	err = s.d.Reader().QueryRow(ctx, `SELECT CAST(coalesce(sum(pending), 0) AS BIGINT), CAST(coalesce(sum(ready), 0) AS BIGINT),
		CAST(coalesce(sum(running), 0) AS BIGINT), CAST(coalesce(sum(finished), 0) AS BIGINT), CAST(coalesce(sum(failed), 0) AS BIGINT),
		CAST(coalesce(sum(cancelled), 0) AS BIGINT) FROM suite_counts`).
		Scan(&c.Pending, &c.Ready, &c.Running, &c.Finished, &c.Failed, &c.Cancelled)
	if err != nil {
		return nil, api.TaskCounts{}, fmt.Errorf("count tasks: %w", s.d.Classify(err))
	}
	return suites, c, nil
}

// countBy runs a query of (key, count) rows into a map.
func (s *Store) countBy(ctx context.Context, query string) (map[string]int, error) {
	rows, err := s.d.Reader().Query(ctx, query)
	if err != nil {
		return nil, s.d.Classify(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, s.d.Classify(err)
		}
		out[k] = n
	}
	return out, s.d.Classify(rows.Err())
}
