package postgres

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Task counts live in suite_counts and change in the same transaction as
// the tasks they count: every statement that adds a task or changes a
// task's state tallies what it did, and the tally is added to the counts
// before the transaction commits, as in the SQLite store.
//
// Unlike SQLite's, a suite's counts are spread over up to countShards rows
// (see the migration): a transaction adds its tally to one shard chosen at
// random, so two replicas claiming from one suite wait on each other's
// counts row only when they happen to pick the same shard. Readers add the
// shards up.

// countShards is how many rows a suite's counts may spread over.
const countShards = 8

func randomShard() int { return rand.IntN(countShards) }

// countsOf sums a suite's shards; it needs the suite's row as s.
const countsOf = `CROSS JOIN LATERAL (SELECT
		coalesce(sum(pending), 0)::bigint AS pending, coalesce(sum(ready), 0)::bigint AS ready,
		coalesce(sum(running), 0)::bigint AS running, coalesce(sum(finished), 0)::bigint AS finished,
		coalesce(sum(failed), 0)::bigint AS failed, coalesce(sum(cancelled), 0)::bigint AS cancelled
	FROM suite_counts WHERE suite_counts.suite_id = s.id) AS c`

// tally is sqlrow.Tally: the counts a transaction changed.
type tally = sqlrow.Tally

// addCounts adds differences to one shard of each suite, making the shard
// when it is first used. Suites go in ID order, so that two transactions
// lock their counts rows in the same order.
const addCounts = `INSERT INTO suite_counts AS sc (suite_id, shard, pending, ready, running, finished, failed, cancelled)
	SELECT d.suite_id, $1, d.pending, d.ready, d.running, d.finished, d.failed, d.cancelled
	FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
		AS d(suite_id, pending, ready, running, finished, failed, cancelled)
	ORDER BY d.suite_id
	ON CONFLICT (suite_id, shard) DO UPDATE SET
		pending = sc.pending + excluded.pending, ready = sc.ready + excluded.ready,
		running = sc.running + excluded.running, finished = sc.finished + excluded.finished,
		failed = sc.failed + excluded.failed, cancelled = sc.cancelled + excluded.cancelled`

// applyCounts adds the tally t to suite_counts in one statement.
func (s *Store) applyCounts(ctx context.Context, tx pgx.Tx, t tally) error {
	var ids []string
	var cols [6][]int64
	for _, id := range slices.Sorted(maps.Keys(t)) {
		c := t[id]
		if *c == (api.TaskCounts{}) {
			continue
		}
		ids = append(ids, id)
		for i, n := range []int{c.Pending, c.Ready, c.Running, c.Finished, c.Failed, c.Cancelled} {
			cols[i] = append(cols[i], int64(n))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, addCounts, s.shard(), ids, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]); err != nil {
		// A suite's tasks cannot outlive it: a missing suite is a bug.
		return fmt.Errorf("count tasks of suites %v: %w", ids, classify(err))
	}
	return nil
}
