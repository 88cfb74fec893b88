package blob

import (
	"context"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// CollectStats says what a Collect did.
type CollectStats struct {
	Kept    int   // blobs in use or stored since olderThan
	Deleted int   // blobs deleted
	Freed   int64 // bytes the deleted blobs held
}

// Collect deletes the blobs in s that inUse says nothing refers to and
// that were last stored (Info.ModTime) before olderThan. The retention
// (olderThan well before now) is what keeps a blob uploaded for a task
// that is not submitted yet: nothing refers to it until then.
//
// Each candidate is looked at again just before it is deleted, so a Put
// or a task that claimed it during the walk keeps it. What remains is a
// claim in the instant between that look and the delete; a task's submit
// closes it by checking its blobs exist after it stores the task.
//
// Collect stops at the first error, with the stats of what it did; the
// next round carries on.
func Collect(ctx context.Context, s Store, inUse func(Digest) bool, olderThan time.Time) (CollectStats, error) {
	var stats CollectStats
	var stale []Digest
	err := s.Walk(ctx, func(info Info) error {
		if inUse(info.Digest) || !info.ModTime.Before(olderThan) {
			stats.Kept++
			return nil
		}
		stale = append(stale, info.Digest)
		return nil
	})
	if err != nil {
		return stats, fmt.Errorf("collect blobs: %w", err)
	}
	for _, d := range stale {
		if err := collectOne(ctx, s, d, inUse, olderThan, &stats); err != nil {
			return stats, fmt.Errorf("collect blobs: %w", err)
		}
	}
	return stats, nil
}

// collectOne deletes d unless it was claimed since the walk.
func collectOne(ctx context.Context, s Store, d Digest, inUse func(Digest) bool, olderThan time.Time, stats *CollectStats) error {
	info, err := s.Stat(ctx, d)
	if errdefs.IsNotFound(err) {
		return nil // deleted by someone else, another replica's Collect
	}
	if err != nil {
		return err
	}
	if inUse(d) || !info.ModTime.Before(olderThan) {
		stats.Kept++
		return nil
	}
	if err := s.Delete(ctx, d); err != nil {
		return err
	}
	stats.Deleted++
	stats.Freed += info.Size
	return nil
}
