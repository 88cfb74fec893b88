package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// RecordHeartbeats stores a batch of heartbeats in one transaction, with
// the suite each agent reports working on; it revives suspect nodes but
// never offline ones (see store.Nodes). A heartbeat older than the one
// stored is ignored, so batches that arrive out
// of order cannot move a node back in time. A zero At means now.
func (s *Store) RecordHeartbeats(ctx context.Context, hbs []store.Heartbeat) error {
	if len(hbs) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		// A beat older than a node's suspicion (batched beats arrive up to
		// a flush late) must not clear it: the suspicion may be about the
		// very connection that sent the beat.
		stmt, err := s.stmt(ctx, tx, `UPDATE nodes SET
				last_heartbeat = ?1,
				agent_state = CASE WHEN status = ?6 THEN agent_state ELSE ?2 END,
				current_suite = CASE WHEN status = ?6 THEN current_suite ELSE ?7 END,
				held = CASE WHEN status = ?6 THEN held ELSE ?9 END,
				status = CASE WHEN status = ?6 OR (status = ?8 AND ?1 < updated_at) THEN status ELSE ?3 END,
				status_reason = CASE WHEN status = ?6 OR (status = ?8 AND ?1 < updated_at) THEN status_reason ELSE '' END,
				updated_at = CASE WHEN status IN (?3, ?6) OR (status = ?8 AND ?1 < updated_at) THEN updated_at ELSE ?4 END
			WHERE id = ?5 AND (last_heartbeat IS NULL OR last_heartbeat <= ?1)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		now := s.now()
		for _, hb := range hbs {
			at := sqlrow.OrNow(hb.At, now)
			if _, err := stmt.ExecContext(ctx, at.UnixNano(), hb.AgentState, api.StatusOnline, now.UnixNano(), hb.NodeID, api.StatusOffline, hb.SuiteID, api.StatusSuspect, hb.Held); err != nil {
				return classify(err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record %d heartbeats: %w", len(hbs), err)
	}
	return nil
}
