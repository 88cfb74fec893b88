package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Who may see a blob, off task_files, which triggers keep from tasks'
// specs and results, and blob_groups, which uploads add to (00020).

// nodeReadsBlob starts from the node's Running tasks (tasks_running) and
// probes task_files' primary key for each, for the task's own inputs and
// for the outputs of the tasks it runs after: its cost grows with the
// tasks the node holds, never with how many tasks name the digest. CROSS
// JOIN keeps SQLite's planner to that order.
const nodeReadsBlob = `SELECT EXISTS (
		SELECT 1 FROM tasks AS t CROSS JOIN task_files AS f
		WHERE t.node_id = ?1 AND t.state = 'Running'
			AND f.task_seq = t.seq AND f.kind = 'in' AND f.digest = ?2
	) OR EXISTS (
		SELECT 1 FROM tasks AS t CROSS JOIN task_deps AS d CROSS JOIN tasks AS a CROSS JOIN task_files AS f
		WHERE t.node_id = ?1 AND t.state = 'Running' AND d.task_id = t.id AND a.id = d.after_id
			AND f.task_seq = a.seq AND f.kind = 'out' AND f.digest = ?2
	)`

// NodeReadsBlob reports whether the node holds a task that names the blob;
// see store.TaskFiles.
func (s *Store) NodeReadsBlob(ctx context.Context, nodeID, digest string) (bool, error) {
	var ok bool
	if err := s.rstmts[nodeReadsBlob].QueryRowContext(ctx, nodeID, digest).Scan(&ok); err != nil {
		return false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return ok, nil
}

// nodeGroups are the groups of the suites of the node's Running tasks.
const nodeGroups = `SELECT su.group_name FROM tasks AS t JOIN suites AS su ON su.id = t.suite_id
	WHERE t.node_id = ?1 AND t.state = 'Running'`

// nodeBlobScope finds the node's Running tasks off tasks_running, then
// probes blob_groups once per group of their suites.
const nodeBlobScope = `SELECT
		EXISTS (SELECT 1 FROM tasks WHERE node_id = ?1 AND state = 'Running'),
		EXISTS (SELECT 1 FROM blob_groups WHERE digest = ?2 AND grp IN (` + nodeGroups + `))`

// NodeBlobScope reports whether the node holds a task, and whether the
// blob was uploaded into the groups of its tasks' suites; see
// store.TaskFiles.
func (s *Store) NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, uploaded bool, err error) {
	err = s.r.QueryRowContext(ctx, nodeBlobScope, nodeID, digest).Scan(&holding, &uploaded)
	if err != nil {
		return false, false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return holding, uploaded, nil
}

// blobInGroups probes blob_groups once per group.
const blobInGroups = `SELECT EXISTS (SELECT 1 FROM blob_groups
	WHERE digest = ?1 AND grp IN (SELECT value FROM json_each(?2)))`

// BlobInGroups reports whether the blob was uploaded into one of groups;
// see store.TaskFiles.
func (s *Store) BlobInGroups(ctx context.Context, digest string, groups []string) (bool, error) {
	if len(groups) == 0 {
		return false, nil
	}
	list, err := sqlrow.JSONArg(groups)
	if err != nil {
		return false, err
	}
	var ok bool
	if err := s.r.QueryRowContext(ctx, blobInGroups, digest, list).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up blob %s in groups: %w", digest, classify(err))
	}
	return ok, nil
}

// AddBlobGroups records that the blob was uploaded into groups; see
// store.TaskFiles.
func (s *Store) AddBlobGroups(ctx context.Context, digest string, groups []string) error {
	if len(groups) == 0 {
		return nil
	}
	list, err := sqlrow.JSONArg(groups)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO blob_groups (digest, grp)
			SELECT ?, value FROM json_each(?)`, digest, list)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("record blob %s in groups: %w", digest, err)
	}
	return nil
}

// AddNodeBlob records that the blob was uploaded into the groups of the
// node's tasks' suites; see store.TaskFiles.
func (s *Store) AddNodeBlob(ctx context.Context, nodeID, digest string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO blob_groups (digest, grp)
			SELECT DISTINCT ?2, g.group_name FROM (`+nodeGroups+`) AS g`, nodeID, digest)
		return classify(err)
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
	list, err := sqlrow.JSONArg(digests)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM blob_groups WHERE digest IN (SELECT value FROM json_each(?))`, list)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("forget the groups of %d blobs: %w", len(digests), err)
	}
	return nil
}

// BlobsInUse lists the digests that tasks name as inputs or hold as
// outputs; the blob store's collection calls it hourly.
func (s *Store) BlobsInUse(ctx context.Context) (map[string]bool, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT digest FROM task_files`)
	if err != nil {
		return nil, fmt.Errorf("list blobs in use: %w", classify(err))
	}
	defer rows.Close()
	used := map[string]bool{}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("list blobs in use: %w", classify(err))
		}
		used[d] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list blobs in use: %w", classify(err))
	}
	return used, nil
}
