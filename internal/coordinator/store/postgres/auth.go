package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// TouchTokens records when tokens were last used, in one statement. Times
// only move forward; unknown IDs and zero times are ignored.
func (s *Store) TouchTokens(ctx context.Context, used map[string]time.Time) error {
	var ids []string
	var ats []int64
	for _, id := range slices.Sorted(maps.Keys(used)) { // one lock order for all writers
		if at := used[id]; !at.IsZero() {
			ids, ats = append(ids, id), append(ats, at.UnixNano())
		}
	}
	if len(ids) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE tokens SET last_used = u.at
			FROM unnest($1::text[], $2::bigint[]) AS u(id, at)
			WHERE tokens.id = u.id AND (tokens.last_used IS NULL OR tokens.last_used < u.at)`, planned, ids, ats)
		return err
	})
	if err != nil {
		return fmt.Errorf("touch %d tokens: %w", len(used), err)
	}
	return nil
}
