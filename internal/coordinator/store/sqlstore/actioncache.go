package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// The action cache (store.TaskFiles; migration 00026).

// CachedActions finds scope's entries for keys and marks them used. A
// miss, the common answer of a first build, costs a read only.
func (s *Store) CachedActions(ctx context.Context, scope string, keys []string) (map[string]store.CachedAction, error) {
	found := map[string]store.CachedAction{}
	for chunk := range slices.Chunk(keys, 1000) {
		a := args{scope}
		rows, err := s.d.Reader().Query(ctx, `SELECT key, result, task_id FROM action_cache
			WHERE scope = $1 AND key IN `+list(&a, chunk), a...)
		if err != nil {
			return nil, fmt.Errorf("look up %d actions in the cache: %w", len(keys), s.d.Classify(err))
		}
		err = scanCachedActions(rows, found)
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("look up %d actions in the cache: %w", len(keys), s.d.Classify(err))
		}
	}
	if len(found) == 0 {
		return found, nil
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		for chunk := range slices.Chunk(slices.Collect(maps.Keys(found)), 1000) {
			a := args{scope, s.d.Now().UnixNano()}
			if _, err := tx.Exec(ctx, `UPDATE action_cache SET used_at = $2 WHERE scope = $1 AND key IN `+list(&a, chunk), a...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mark %d cached actions used: %w", len(found), err)
	}
	return found, nil
}

func scanCachedActions(rows Rows, into map[string]store.CachedAction) error {
	for rows.Next() {
		var key, result string
		var e store.CachedAction
		if err := rows.Scan(&key, &result, &e.TaskID); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(result), &e.Result); err != nil {
			return fmt.Errorf("action %s: %w", key, err)
		}
		into[key] = e
	}
	return rows.Err()
}

// CacheActions stores entries in scope, replacing those of their keys.
func (s *Store) CacheActions(ctx context.Context, scope string, entries map[string]store.CachedAction) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		now := s.d.Now().UnixNano()
		for _, key := range slices.Sorted(maps.Keys(entries)) {
			e := entries[key]
			result, err := json.Marshal(e.Result)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO action_cache (scope, key, result, task_id, created_at, used_at)
				VALUES ($1, $2, $3, $4, $5, $5)
				ON CONFLICT (scope, key) DO UPDATE SET result = excluded.result, task_id = excluded.task_id,
					created_at = excluded.created_at, used_at = excluded.used_at`,
				scope, key, string(result), e.TaskID, now); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM action_cache_files WHERE scope = $1 AND key = $2`, scope, key); err != nil {
				return err
			}
			for _, f := range e.Result.Outputs {
				if _, err := tx.Exec(ctx, `INSERT INTO action_cache_files (scope, key, digest) VALUES ($1, $2, $3)
					ON CONFLICT DO NOTHING`, scope, key, f.Digest); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %d actions in the cache: %w", len(entries), err)
	}
	return nil
}

// DeleteCachedActions removes scope's entry of key, or all of scope's.
func (s *Store) DeleteCachedActions(ctx context.Context, scope, key string) (int, error) {
	var n int64
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM action_cache WHERE scope = $1 AND ($2 = '' OR key = $2)`, scope, key)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete cached actions of %s: %w", scope, err)
	}
	return int(n), nil
}

// ExpireCachedActions removes the entries last used before before.
func (s *Store) ExpireCachedActions(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM action_cache WHERE used_at < $1`, before.UnixNano())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("expire cached actions: %w", err)
	}
	return int(n), nil
}
