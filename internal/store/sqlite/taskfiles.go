package sqlite

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/store/sqlrow"
)

// Who may see a blob, off task_files (00020), which triggers keep from
// tasks' specs and results.

// nodeReadsBlob starts from the node's Running tasks (tasks_running) and
// probes task_files' primary key for each, for the task's own inputs and
// for the outputs of the tasks it runs after: its cost grows with the
// tasks the node holds, never with how many tasks name the digest. CROSS
// JOIN keeps SQLite's planner to that order.
const nodeReadsBlob = `SELECT EXISTS (
		SELECT 1 FROM tasks AS t CROSS JOIN task_files AS f
		WHERE t.node_id = ?1 AND t.state = 'Running'
			AND f.task_id = t.id AND f.kind = 'in' AND f.digest = ?2
	) OR EXISTS (
		SELECT 1 FROM tasks AS t CROSS JOIN task_deps AS d CROSS JOIN task_files AS f
		WHERE t.node_id = ?1 AND t.state = 'Running' AND d.task_id = t.id
			AND f.task_id = d.after_id AND f.kind = 'out' AND f.digest = ?2
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

// nodeBlobScope finds the groups of the node's Running tasks' suites off
// tasks_running, then probes task_files_digest once per group.
const nodeBlobScope = `SELECT
		EXISTS (SELECT 1 FROM tasks WHERE node_id = ?1 AND state = 'Running'),
		EXISTS (SELECT 1 FROM task_files WHERE digest = ?2 AND grp IN (
			SELECT su.group_name FROM tasks AS t JOIN suites AS su ON su.id = t.suite_id
			WHERE t.node_id = ?1 AND t.state = 'Running'))`

// NodeBlobScope reports whether the node holds a task, and whether the
// groups of its tasks' suites name the blob; see store.TaskFiles.
func (s *Store) NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, named bool, err error) {
	err = s.r.QueryRowContext(ctx, nodeBlobScope, nodeID, digest).Scan(&holding, &named)
	if err != nil {
		return false, false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return holding, named, nil
}

// blobNamedInGroups probes task_files_digest once per group.
const blobNamedInGroups = `SELECT EXISTS (SELECT 1 FROM task_files
	WHERE digest = ?1 AND grp IN (SELECT value FROM json_each(?2)))`

// BlobNamedInGroups reports whether a task in one of groups names the
// blob; see store.TaskFiles.
func (s *Store) BlobNamedInGroups(ctx context.Context, digest string, groups []string) (bool, error) {
	if len(groups) == 0 {
		return false, nil
	}
	list, err := sqlrow.JSONArg(groups)
	if err != nil {
		return false, err
	}
	var ok bool
	err = s.r.QueryRowContext(ctx, blobNamedInGroups, digest, list).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up blob %s in groups: %w", digest, classify(err))
	}
	return ok, nil
}

// BlobsInUse lists the digests that tasks name as inputs or hold as
// outputs, off task_files_digest; the blob store's collection calls it
// hourly.
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
