package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Who may see a blob, off task_files (00020), which triggers keep from
// tasks' specs and results.

// NodeReadsBlob reports whether the node holds a task that names the blob;
// see store.TaskFiles. The plan starts from the node's Running tasks
// (tasks_running) and probes task_files' primary key for each, so its cost
// grows with the tasks the node holds, not with how many name the digest.
func (s *Store) NodeReadsBlob(ctx context.Context, nodeID, digest string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM tasks AS t JOIN task_files AS f
				ON f.task_id = t.id AND f.kind = 'in' AND f.digest = $2
			WHERE t.node_id = $1 AND t.state = 'Running'
		) OR EXISTS (
			SELECT 1 FROM tasks AS t JOIN task_deps AS d ON d.task_id = t.id
				JOIN task_files AS f ON f.task_id = d.after_id AND f.kind = 'out' AND f.digest = $2
			WHERE t.node_id = $1 AND t.state = 'Running'
		)`, nodeID, digest).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return ok, nil
}

// NodeBlobScope reports whether the node holds a task, and whether the
// groups of its tasks' suites name the blob; see store.TaskFiles.
func (s *Store) NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, named bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM tasks WHERE node_id = $1 AND state = 'Running'),
			EXISTS (SELECT 1 FROM task_files WHERE digest = $2 AND grp IN (
				SELECT su.group_name FROM tasks AS t JOIN suites AS su ON su.id = t.suite_id
				WHERE t.node_id = $1 AND t.state = 'Running'))`,
		nodeID, digest).Scan(&holding, &named)
	if err != nil {
		return false, false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return holding, named, nil
}

// BlobNamedInGroups reports whether a task in one of groups names the
// blob; see store.TaskFiles.
func (s *Store) BlobNamedInGroups(ctx context.Context, digest string, groups []string) (bool, error) {
	if len(groups) == 0 {
		return false, nil
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM task_files
		WHERE digest = $1 AND grp = ANY($2::text[]))`, digest, groups).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up blob %s in groups: %w", digest, classify(err))
	}
	return ok, nil
}

// BlobsInUse lists the digests that tasks name as inputs or hold as
// outputs, off task_files_digest; the blob store's collection calls it
// hourly.
func (s *Store) BlobsInUse(ctx context.Context) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT digest FROM task_files`)
	if err != nil {
		return nil, fmt.Errorf("list blobs in use: %w", classify(err))
	}
	digests, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list blobs in use: %w", classify(err))
	}
	used := make(map[string]bool, len(digests))
	for _, d := range digests {
		used[d] = true
	}
	return used, nil
}
