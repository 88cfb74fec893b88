package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Who may see a blob, off task_files, which triggers keep from tasks'
// specs and results, and blob_groups, which uploads add to (00020). Each
// database keeps NodeReadsBlob, a hot path whose join order it pins.

// nodeGroups are the groups of the suites of the node's Running tasks.
const nodeGroups = `SELECT su.group_name FROM tasks AS t JOIN suites AS su ON su.id = t.suite_id
	WHERE t.node_id = $1 AND t.state = 'running'`

// NodeBlobScopeSQL is NodeBlobScope's statement ($1 the node, $2 the
// digest), for the databases' tests of its plan.
const NodeBlobScopeSQL = `SELECT
	EXISTS (SELECT 1 FROM tasks WHERE node_id = $1 AND state = 'running'),
	EXISTS (SELECT 1 FROM blob_groups WHERE digest = $2 AND grp IN (` + nodeGroups + `))`

// NodeBlobScope reports whether the node holds a task, and whether the
// blob was uploaded into the groups of its tasks' suites; see
// store.TaskFiles. It finds the node's Running tasks off tasks_running,
// then probes blob_groups once per group of their suites.
func (s *Store) NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, uploaded bool, err error) {
	err = s.d.Reader().QueryRow(ctx, NodeBlobScopeSQL, nodeID, digest).Scan(&holding, &uploaded)
	if err != nil {
		return false, false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, s.d.Classify(err))
	}
	return holding, uploaded, nil
}

// BlobInGroupsSQL is BlobInGroups' statement: $1 the digest, in the
// parenthesized list of the groups' placeholders.
func BlobInGroupsSQL(in string) string {
	return `SELECT EXISTS (SELECT 1 FROM blob_groups WHERE digest = $1 AND grp IN ` + in + `)`
}

// BlobInGroups reports whether the blob was uploaded into one of groups;
// see store.TaskFiles. It probes blob_groups once per group.
func (s *Store) BlobInGroups(ctx context.Context, digest string, groups []string) (bool, error) {
	if len(groups) == 0 {
		return false, nil
	}
	a := args{digest}
	var ok bool
	err := s.d.Reader().QueryRow(ctx, BlobInGroupsSQL(list(&a, groups)), a...).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up blob %s in groups: %w", digest, s.d.Classify(err))
	}
	return ok, nil
}

// AddBlobGroups records that the blob was uploaded into groups; see
// store.TaskFiles.
func (s *Store) AddBlobGroups(ctx context.Context, digest string, groups []string) error {
	if len(groups) == 0 {
		return nil
	}
	a := args{digest}
	rows := make([]string, len(groups))
	for i, g := range groups {
		rows[i] = "($1, " + a.add(g) + ")"
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO blob_groups (digest, grp) VALUES `+strings.Join(rows, ", ")+` ON CONFLICT DO NOTHING`, a...)
		return err
	})
	if err != nil {
		return fmt.Errorf("record blob %s in groups: %w", digest, err)
	}
	return nil
}

// AddNodeBlob records that the blob was uploaded into the groups of the
// node's tasks' suites; see store.TaskFiles.
func (s *Store) AddNodeBlob(ctx context.Context, nodeID, digest string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		// WHERE true: SQLite would read ON CONFLICT as the join's.
		_, err := tx.Exec(ctx, `INSERT INTO blob_groups (digest, grp)
			SELECT DISTINCT $2, g.group_name FROM (`+nodeGroups+`) AS g WHERE true ON CONFLICT DO NOTHING`, nodeID, digest)
		return err
	})
	if err != nil {
		return fmt.Errorf("record blob %s of node %s: %w", digest, nodeID, err)
	}
	return nil
}

// ForgetBlobGroups forgets the groups of blobs that are gone; see
// store.TaskFiles.
func (s *Store) ForgetBlobGroups(ctx context.Context, digests []string) error {
	if len(digests) == 0 {
		return nil
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		// In chunks: a statement takes a bounded number of arguments.
		for chunk := range slices.Chunk(digests, 1000) {
			var a args
			if _, err := tx.Exec(ctx, `DELETE FROM blob_groups WHERE digest IN `+list(&a, chunk), a...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("forget the groups of %d blobs: %w", len(digests), err)
	}
	return nil
}

// BlobsInUse lists the digests that tasks name as inputs or hold as
// outputs or logs; the blob store's collection calls it hourly.
func (s *Store) BlobsInUse(ctx context.Context) (map[string]bool, error) {
	rows, err := s.d.Reader().Query(ctx, `SELECT digest FROM task_files UNION SELECT digest FROM action_cache_files
		UNION SELECT digest FROM task_logs`)
	if err != nil {
		return nil, fmt.Errorf("list blobs in use: %w", s.d.Classify(err))
	}
	defer rows.Close()
	used := map[string]bool{}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("list blobs in use: %w", s.d.Classify(err))
		}
		used[d] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list blobs in use: %w", s.d.Classify(err))
	}
	return used, nil
}

// TaskLog reads an attempt's full log; see store.TaskFiles.
func (s *Store) TaskLog(ctx context.Context, taskID string, attempt int) (api.TaskLog, error) {
	var l api.TaskLog
	err := s.d.Reader().QueryRow(ctx, `SELECT digest, bytes, truncated FROM task_logs WHERE task_id = $1 AND attempt = $2`,
		taskID, attempt).Scan(&l.Digest, &l.Bytes, &l.Truncated)
	if s.d.NoRows(err) {
		return api.TaskLog{}, errdefs.NotFound("task %s attempt %d kept no full log: its output is all in its result", taskID, attempt)
	}
	if err != nil {
		return api.TaskLog{}, fmt.Errorf("read the log of task %s attempt %d: %w", taskID, attempt, s.d.Classify(err))
	}
	return l, nil
}

// recordLogs notes the full logs that reports name, whether or not their
// attempts count: a log is what the attempt printed either way. A stopped
// attempt's number is used again by the task's next run, whose log then
// takes its place.
func recordLogs(ctx context.Context, tx Querier, reports []store.Attempt) error {
	for _, r := range reports {
		l := r.Result.Log
		if l == nil {
			continue
		}
		if _, err := tx.Exec(ctx, `INSERT INTO task_logs (task_id, attempt, digest, bytes, truncated) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (task_id, attempt) DO UPDATE SET digest = excluded.digest, bytes = excluded.bytes, truncated = excluded.truncated`, r.TaskID, r.Attempt, l.Digest, l.Bytes, l.Truncated); err != nil {
			return err
		}
	}
	return nil
}
