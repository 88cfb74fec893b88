package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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
			WHERE t.node_id = $1 AND t.state = 'Running'
		) OR EXISTS (
			SELECT 1 FROM tasks AS t JOIN task_deps AS d ON d.task_id = t.id
				JOIN tasks AS a ON a.id = d.after_id
				JOIN task_files AS f ON f.task_seq = a.seq AND f.kind = 'out' AND f.digest = $2
			WHERE t.node_id = $1 AND t.state = 'Running'
		)`, nodeID, digest).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return ok, nil
}

// nodeGroups are the groups of the suites of the node's Running tasks.
const nodeGroups = `SELECT su.group_name FROM tasks AS t JOIN suites AS su ON su.id = t.suite_id
	WHERE t.node_id = $1 AND t.state = 'Running'`

// NodeBlobScope reports whether the node holds a task, and whether the
// blob was uploaded into the groups of its tasks' suites; see
// store.TaskFiles.
func (s *Store) NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, uploaded bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM tasks WHERE node_id = $1 AND state = 'Running'),
			EXISTS (SELECT 1 FROM blob_groups WHERE digest = $2 AND grp IN (`+nodeGroups+`))`,
		nodeID, digest).Scan(&holding, &uploaded)
	if err != nil {
		return false, false, fmt.Errorf("authorize blob %s for node %s: %w", digest, nodeID, classify(err))
	}
	return holding, uploaded, nil
}

// BlobInGroups reports whether the blob was uploaded into one of groups;
// see store.TaskFiles.
func (s *Store) BlobInGroups(ctx context.Context, digest string, groups []string) (bool, error) {
	if len(groups) == 0 {
		return false, nil
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM blob_groups
		WHERE digest = $1 AND grp = ANY($2::text[]))`, digest, groups).Scan(&ok)
	if err != nil {
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO blob_groups (digest, grp)
			SELECT $1, g FROM unnest($2::text[]) AS g ON CONFLICT DO NOTHING`, digest, groups)
		return err
	})
	if err != nil {
		return fmt.Errorf("record blob %s in groups: %w", digest, classify(err))
	}
	return nil
}

// AddNodeBlob records that the blob was uploaded into the groups of the
// node's tasks' suites; see store.TaskFiles.
func (s *Store) AddNodeBlob(ctx context.Context, nodeID, digest string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO blob_groups (digest, grp)
			SELECT DISTINCT $2, g.group_name FROM (`+nodeGroups+`) AS g ON CONFLICT DO NOTHING`, nodeID, digest)
		return err
	})
	if err != nil {
		return fmt.Errorf("record blob %s of node %s: %w", digest, nodeID, classify(err))
	}
	return nil
}

// ForgetBlobGroups forgets the groups of blobs that are gone; see
// store.TaskFiles.
func (s *Store) ForgetBlobGroups(ctx context.Context, digests []string) error {
	if len(digests) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM blob_groups WHERE digest = ANY($1::text[])`, digests)
		return err
	})
	if err != nil {
		return fmt.Errorf("forget the groups of %d blobs: %w", len(digests), err)
	}
	return nil
}

// BlobsInUse lists the digests that tasks name as inputs or hold as
// outputs; the blob store's collection calls it hourly.
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
