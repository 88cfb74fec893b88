package sqlite

import (
	"context"
	"fmt"
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
		WHERE t.node_id = ?1 AND t.state = 'running'
			AND f.task_seq = t.seq AND f.kind = 'in' AND f.digest = ?2
	) OR EXISTS (
		SELECT 1 FROM tasks AS t CROSS JOIN task_deps AS d CROSS JOIN tasks AS a CROSS JOIN task_files AS f
		WHERE t.node_id = ?1 AND t.state = 'running' AND d.task_id = t.id AND a.id = d.after_id
			AND f.task_seq = a.seq AND f.kind = 'out' AND f.digest = ?2
	)`

// NodeReadsBlob reports whether the node holds a task that names the blob;
// see store.TaskFiles.
func (s *Store) NodeReadsBlob(ctx context.Context, nodeID, digest string) (bool, error) {
	var ok bool
	if err := s.rc.in(ctx, nil, nodeReadsBlob).QueryRowContext(ctx, nodeID, digest).Scan(&ok); err != nil {
		return false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return ok, nil
}
