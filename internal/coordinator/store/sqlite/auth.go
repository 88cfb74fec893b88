package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// TouchTokens records when tokens were last used, in one transaction. Times
// only move forward; unknown IDs and zero times are ignored.
func (s *Store) TouchTokens(ctx context.Context, used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := s.stmt(ctx, tx, `UPDATE tokens SET last_used = ?1
			WHERE id = ?2 AND (last_used IS NULL OR last_used < ?1)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for id, at := range used {
			if at.IsZero() {
				continue
			}
			if _, err := stmt.ExecContext(ctx, at.UnixNano(), id); err != nil {
				return classify(err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("touch %d tokens: %w", len(used), err)
	}
	return nil
}
