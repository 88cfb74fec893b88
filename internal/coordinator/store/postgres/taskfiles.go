package postgres

import (
	"context"
	"fmt"
)

// Who may see a blob, off task_files, which triggers keep from tasks'
// specs and results, and blob_groups, which uploads add to (00020).

// NodeReadsBlob reports whether the node holds a task that names the blob;
// see store.TaskFiles. With the node's Running tasks from tasks_running, a
// probe of task_files' primary key each answers; the planner takes the
// digest's side first only where its statistics say few tasks name it.
func (s *Store) NodeReadsBlob(ctx context.Context, nodeID, digest string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM tasks AS t JOIN task_files AS f
				ON f.task_seq = t.seq AND f.kind = 'in' AND f.digest = $2
			WHERE t.node_id = $1 AND t.state = 'running'
		) OR EXISTS (
			SELECT 1 FROM tasks AS t JOIN task_deps AS d ON d.task_id = t.id
				JOIN tasks AS a ON a.id = d.after_id
				JOIN task_files AS f ON f.task_seq = a.seq AND f.kind = 'out' AND f.digest = $2
			WHERE t.node_id = $1 AND t.state = 'running'
		)`, nodeID, digest).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return ok, nil
}
