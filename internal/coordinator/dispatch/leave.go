package dispatch

import (
	"context"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// noteLeave keeps what an agent said when it left a suite: a prepare
// failure becomes the suite's problem on that node (and the dispatcher
// backs off), and so does a cleanup hook that failed after the suite ran
// (the suite's state is not touched); leaving after the suite ran, and
// cleaned up, clears an older problem.
func (d *Dispatcher) noteLeave(ctx context.Context, nodeID string, req api.SuiteLeave) error {
	if req.Stopped {
		return d.stopSuiteOn(ctx, req.SuiteID, nodeID)
	}
	p := req.Problem
	if p == nil && strings.HasPrefix(req.Reason, "prepare-failed") {
		// An agent from before problems: all it gave is one line.
		p = &api.SuiteProblem{Stage: api.StagePrepare, ExitCode: -1,
			Reason: strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(req.Reason, "prepare-failed"), ":"))}
	}
	if p == nil {
		if ranFine(req.Reason) {
			d.prepare.Clear(req.SuiteID, nodeID)
			return d.store.ClearSuiteProblem(ctx, req.SuiteID, nodeID)
		}
		return nil
	}
	switch p.Stage {
	case api.StagePrepare, api.StageWorkers, api.StageCleanup:
	default:
		return errdefs.Field("problem.stage", "must be %s, %s or %s, got %q", api.StagePrepare, api.StageWorkers, api.StageCleanup, p.Stage)
	}
	if ok, err := d.Why.MayRun(ctx, req.SuiteID, nodeID); err != nil || !ok {
		return err // a node that may not run the suite has nothing to say of it
	}
	if p.Stage == api.StageCleanup {
		// The suite ran here, so its prepare works: the dispatcher need
		// not keep it off the node. The problem is kept all the same.
		d.prepare.Clear(req.SuiteID, nodeID)
	} else {
		d.prepare.Note(req.SuiteID, nodeID)
		// Kept off the suite until then; idle by that time, it is woken
		// to take it up again.
		time.AfterFunc(PrepareBackoff, func() { d.NodeChanged(nodeID) })
	}
	kept := api.SuiteProblem{NodeID: nodeID, Stage: p.Stage, ExitCode: p.ExitCode,
		Reason: cutTail(p.Reason, api.MaxProblemReason, true), OutputTail: cutTail(p.OutputTail, api.MaxProblemOutput, false),
		At: time.Now().UTC()}
	err := d.store.PutSuiteProblem(ctx, req.SuiteID, kept)
	if errdefs.IsNotFound(err) {
		return nil // the suite or node is gone: nothing to explain
	}
	return err
}

// ranFine reports whether a leave reason means the suite ran on the node,
// so its prepare worked.
func ranFine(reason string) bool {
	return reason == "complete" || reason == "cancelled" ||
		strings.HasPrefix(reason, "shutdown") || strings.HasPrefix(reason, "moved on")
}
