package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// recordHeartbeats applies a batch of beats in one statement, each row's
// conditions checked on the row as it is when the statement locks it.
// Every CASE reads the node as it was before this beat, as in the SQLite
// store; a beat older than the node's suspicion (batched beats arrive up to
// a flush late) must not clear it: the suspicion may be about the very
// connection that sent the beat.
const recordHeartbeats = `UPDATE nodes SET
		last_heartbeat = h.beat,
		agent_state = CASE WHEN status = $5 THEN agent_state ELSE h.state END,
		current_suite = CASE WHEN status = $5 THEN current_suite ELSE h.suite END,
		held = CASE WHEN status = $5 THEN nodes.held ELSE h.held END,
		status = CASE WHEN status = $5 OR (status = $6 AND h.beat < updated_at) THEN status ELSE $7 END,
		status_reason = CASE WHEN status = $5 OR (status = $6 AND h.beat < updated_at) THEN status_reason ELSE '' END,
		updated_at = CASE WHEN status IN ($7, $5) OR (status = $6 AND h.beat < updated_at) THEN updated_at ELSE $8 END
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $9::int[]) AS h(id, beat, state, suite, held)
	WHERE nodes.id = h.id AND (nodes.last_heartbeat IS NULL OR nodes.last_heartbeat <= h.beat)`

// RecordHeartbeats stores a batch of heartbeats in one statement; it
// revives suspect nodes but never offline ones (see store.Nodes). A
// heartbeat older than the one stored is ignored. A zero At means now.
func (s *Store) RecordHeartbeats(ctx context.Context, hbs []store.Heartbeat) error {
	if len(hbs) == 0 {
		return nil
	}
	now := s.now()
	beats := latestBeats(hbs, now)
	ids := make([]string, len(beats))
	ats := make([]int64, len(beats))
	states := make([]string, len(beats))
	suites := make([]string, len(beats))
	held := make([]int32, len(beats))
	for i, hb := range beats {
		ids[i], ats[i], states[i], suites[i], held[i] = hb.NodeID, hb.At.UnixNano(), hb.AgentState, hb.SuiteID, int32(hb.Held)
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, recordHeartbeats, planned, ids, ats, states, suites,
			api.StatusOffline, api.StatusSuspect, api.StatusOnline, now.UnixNano(), held)
		return err
	})
	if err != nil {
		return fmt.Errorf("record %d heartbeats: %w", len(hbs), err)
	}
	return nil
}

// latestBeats keeps each node's latest beat (of equal ones, the last in
// the batch), which is what applying them one by one would leave, in node
// order, so that concurrent batches lock their nodes in the same order.
func latestBeats(hbs []store.Heartbeat, now time.Time) []store.Heartbeat {
	latest := make(map[string]int, len(hbs))
	var out []store.Heartbeat
	for _, hb := range hbs {
		hb.At = sqlrow.OrNow(hb.At, now)
		i, ok := latest[hb.NodeID]
		switch {
		case !ok:
			latest[hb.NodeID] = len(out)
			out = append(out, hb)
		case !hb.At.Before(out[i].At):
			out[i] = hb
		}
	}
	slices.SortFunc(out, func(a, b store.Heartbeat) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// SetNodeStatus moves a node to status, if its current status is one of
// onlyIf (any, if none are given).
