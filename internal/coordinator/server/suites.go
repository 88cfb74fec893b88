package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// resolveSuite finds a suite the caller may do what with (dispatch.ResolveSuite).
func (s *Server) resolveSuite(ctx context.Context, ref string, what dispatch.Access) (store.Suite, error) {
	return s.dispatcher.ResolveSuite(ctx, principalFrom(ctx), ref, what)
}

func (s *Server) handleCreateSuite(w http.ResponseWriter, r *http.Request) error {
	var spec api.SuiteSpec
	if err := decodeJSON(r, &spec); err != nil {
		return err
	}
	if err := dispatch.ValidateSuite(&spec); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if spec.Group == "" {
		if err := p.RequireAdmin("create a suite in no group (set group)"); err != nil {
			return err
		}
	} else if err := p.Require(api.RoleWrite, []string{spec.Group}, "create a suite in group "+spec.Group); err != nil {
		return err
	}
	if err := requireRunAs(p, spec); err != nil {
		return err
	}
	su, warning, err := s.dispatcher.CreateSuite(r.Context(), spec, p.User)
	if errors.Is(err, errdefs.ErrConflict) {
		return s.nameTaken(r.Context(), spec.Name, err)
	}
	if err != nil {
		return fmt.Errorf("create suite %s: %w", spec.Name, err)
	}
	out := su.Wire()
	out.WaitingReason = warning
	httpapi.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// nameTaken explains a suite name that a live suite holds. The store's
// error names that suite; the caller sees it only if they may read it, so
// a clash never tells a user another group's suite ID.
func (s *Server) nameTaken(ctx context.Context, name string, err error) error {
	_, rerr := s.resolveSuite(ctx, name, dispatch.ReadSuite)
	switch {
	case rerr == nil:
		return fmt.Errorf("create suite %s: %w", name, err)
	case errdefs.IsNotFound(rerr) || errors.Is(rerr, errdefs.ErrPermission):
		return errdefs.Conflict("create suite %s: a live suite that you may not see has that name; choose another name", name)
	}
	return fmt.Errorf("create suite %s: look up the suite of that name: %w", name, rerr)
}

// requireRunAs lets a suite run its code with the agent's own rights
// (run_as root or agent, which can read the node's credential) only when
// an admin of its group asks; anyone who may create the suite may name an
// unprivileged user.
func requireRunAs(p auth.Principal, spec api.SuiteSpec) error {
	if !workload.Privileged(spec.RunAs) || p.Can(api.RoleAdmin, []string{spec.Group}) {
		return nil
	}
	return fmt.Errorf("run_as: %q runs the suite's tasks and hooks with the agent's own rights, so only an admin of group %s may ask for it: "+
		"leave run_as out to run them as an unprivileged user, or ask a group admin to create the suite: %w",
		spec.RunAs, spec.Group, errdefs.ErrPermission)
}

func (s *Server) handleListSuites(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	var f store.SuiteFilter
	if st := r.URL.Query().Get("state"); st != "" {
		st, err := validate.OneOf("state", st, api.SuiteOpen, api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled)
		if err != nil {
			return err
		}
		f.States = []string{st}
	}
	pg, err := paging.Read(r.URL.Query(), "suites", strings.Join(f.States, ","))
	if err != nil {
		return err
	}
	suites, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Suite, error) {
		f.Page = sp
		return s.store.ListSuites(r.Context(), f)
	}, store.Suite.Cursor, func(su store.Suite) bool {
		return su.Owner == p.User || p.Can(api.RoleRead, dispatch.SuiteGroups(su))
	})
	if err != nil {
		return fmt.Errorf("list suites: %w", err)
	}
	out := api.SuiteList{Suites: make([]api.Suite, 0, len(suites)), Next: next}
	for _, su := range suites {
		w := su.Wire()
		// Why it waits costs no walk of the fleet (dispatch.Why), and only
		// a suite with Ready tasks that runs nowhere has a reason.
		if w.WaitingReason, err = s.reasons.Get(su, func() (string, error) { return s.dispatcher.Why.WaitingReason(r.Context(), su) }); err != nil {
			return fmt.Errorf("list suites: %w", err)
		}
		out.Suites = append(out.Suites, w)
	}
	if err := s.fillHeld(r.Context(), out.Suites); err != nil {
		return fmt.Errorf("list suites: %w", err)
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// fillHeld says how many of each suite's running tasks the nodes hold and
// have not started (TaskCounts.Held), as their agents last said.
func (s *Server) fillHeld(ctx context.Context, suites []api.Suite) error {
	var ids []string
	for _, su := range suites {
		if su.Counts.Running > 0 {
			ids = append(ids, su.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	held, err := s.store.HeldTasks(ctx, ids)
	if err != nil {
		return err
	}
	for i := range suites {
		// The agents' counts lag the store's by a heartbeat flush.
		suites[i].Counts.Held = min(held[suites[i].ID], suites[i].Counts.Running)
	}
	return nil
}

// A GET of a suite may wait for it to change: with ?wait=DURATION and the
// ETag of the answer it has (If-None-Match), it is answered when the suite
// differs from that answer, or with 304 once the wait is over. suite wait,
// suite watch and scripts so see each change at once, at the price of one
// request per change rather than one per poll.
const (
	maxSuiteWait = time.Minute
	// suiteWaitLook is how often a waiting GET reads the suite again, for
	// the changes other servers make (this one's wake it at once).
	suiteWaitLook = time.Second
)

func (s *Server) handleGetSuite(w http.ResponseWriter, r *http.Request) error {
	wait, err := queryDuration(r, "wait", maxSuiteWait)
	if err != nil {
		return err
	}
	have := r.Header.Get("If-None-Match")
	deadline := time.Now().Add(wait)
	for {
		out, changed, err := s.suiteAnswer(r.Context(), r.PathValue("suite"), wait > 0 && have != "")
		if err != nil {
			return err
		}
		body, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		etag := `"` + hex.EncodeToString(sum[:12]) + `"`
		w.Header().Set("ETag", etag)
		left := time.Until(deadline)
		if etag != have {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Write(append(body, '\n'))
			return nil
		}
		if left <= 0 {
			w.WriteHeader(http.StatusNotModified)
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-changed:
		case <-time.After(min(left, suiteWaitLook)):
		}
	}
}

// suiteAnswer is the suite as GET answers it: with its problems and why
// it waits. With listen, it also returns a channel closed at the suite's
// next change, listened to before the suite is read: a change made during
// the read still closes it.
func (s *Server) suiteAnswer(ctx context.Context, ref string, listen bool) (api.Suite, <-chan struct{}, error) {
	su, err := s.resolveSuite(ctx, ref, dispatch.ReadSuite)
	if err != nil {
		return api.Suite{}, nil, err
	}
	var changed <-chan struct{}
	if listen {
		changed = s.dispatcher.Changes.Changed(su.ID)
		if su, err = s.store.GetSuite(ctx, su.ID); err != nil {
			return api.Suite{}, nil, err
		}
	}
	out := su.Wire()
	problems, err := s.store.SuiteProblems(ctx, su.ID, "")
	if err != nil {
		return api.Suite{}, nil, fmt.Errorf("get suite %s: %w", su.Spec.Name, err)
	}
	out.Problems = apiProblems(problems)
	one := []api.Suite{out}
	if err := s.fillHeld(ctx, one); err != nil {
		return api.Suite{}, nil, fmt.Errorf("get suite %s: %w", su.Spec.Name, err)
	}
	out = one[0]
	if out.WaitingReason, err = s.reasons.Get(su, func() (string, error) { return s.dispatcher.Why.WaitingReason(ctx, su) }); err != nil {
		return api.Suite{}, nil, fmt.Errorf("get suite %s: %w", su.Spec.Name, err)
	}
	return out, changed, nil
}

// setSuiteState closes or cancels a suite.
func (s *Server) setSuiteState(w http.ResponseWriter, r *http.Request, to string) error {
	su, err := s.resolveSuite(r.Context(), r.PathValue("suite"), dispatch.StopSuite)
	if err != nil {
		return err
	}
	if su, err = s.dispatcher.SetSuiteState(r.Context(), su.ID, to); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, su.Wire())
	return nil
}

func (s *Server) handleCloseSuite(w http.ResponseWriter, r *http.Request) error {
	return s.setSuiteState(w, r, api.SuiteClosed)
}

func (s *Server) handleCancelSuite(w http.ResponseWriter, r *http.Request) error {
	return s.setSuiteState(w, r, api.SuiteCancelled)
}

// AssignRequest is the body of POST /v1/suites/{suite}/assign.
type assignRequest struct {
	Nodes []string `json:"nodes"` // node IDs or names; empty: back to automatic assignment
	// Add keeps the nodes assigned already: the suite runs on those and
	// these. Without it the list replaces the assignment, and nodes left
	// out stop taking the suite's tasks.
	Add bool `json:"add,omitempty"`
}

func (s *Server) handleAssignSuite(w http.ResponseWriter, r *http.Request) error {
	var req assignRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	su, err := s.resolveSuite(r.Context(), r.PathValue("suite"), dispatch.WorkSuite)
	if err != nil {
		return err
	}
	if req.Add && len(req.Nodes) == 0 {
		return errdefs.Field("nodes", "name the nodes to add")
	}
	ids := make([]string, len(req.Nodes))
	for i, ref := range req.Nodes {
		n, err := s.resolveNode(r.Context(), ref, api.RoleWrite)
		if err != nil {
			return fmt.Errorf("nodes[%d]: %w", i, err)
		}
		if err := dispatch.ValidateCoresOn(su.Spec.WorkerSchedule.CPUBinding, n.Name, n.Hardware.Cores); err != nil {
			return err
		}
		ids[i] = n.ID
	}
	if su, err = s.dispatcher.Assign(r.Context(), su.ID, ids, req.Add); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, su.Wire())
	return nil
}

// handleSubmitTasks adds a batch of tasks to a suite, all or none. The
// caller's role is checked before the body is read, and the body is
// decoded as a stream within the server's budget for batches in flight.
func (s *Server) handleSubmitTasks(w http.ResponseWriter, r *http.Request) error {
	// Submit needs the suite's ID, name and group; AddTasks checks that it
	// is still Open.
	su, err := s.dispatcher.ResolveSuiteSpec(r.Context(), principalFrom(r.Context()), r.PathValue("suite"), dispatch.WorkSuite)
	if err != nil {
		return err
	}
	reserve := batchReservation(r)
	if err := s.submitBudget.Acquire(r.Context(), reserve, submitBudgetWait); err != nil {
		w.Header().Set("Retry-After", "5")
		return err
	}
	defer s.submitBudget.Release(reserve)
	specs, err := readTaskBatch(w, r)
	if err != nil {
		return err
	}
	ids, err := s.dispatcher.Submit(r.Context(), su, specs)
	return answer(w, http.StatusCreated, api.SubmitResult{IDs: ids}, err)
}

func (s *Server) handleListTasks(w http.ResponseWriter, r *http.Request) error {
	su, err := s.resolveSuite(r.Context(), r.PathValue("suite"), dispatch.ReadSuite)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.TaskFilter{SuiteID: su.ID}
	if st := q.Get("state"); st != "" {
		st, err := validate.OneOf("state", st, api.TaskPending, api.TaskReady, api.TaskRunning, api.TaskFinished, api.TaskFailed, api.TaskCancelled)
		if err != nil {
			return err
		}
		f.States = []string{st}
	}
	f.Name = q.Get("name")
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return errdefs.Field("label", "must be key=value, got %q", l)
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	pg, err := paging.Read(q, "tasks", su.ID, strings.Join(f.States, ","), f.Name, strings.Join(q["label"], ","))
	if err != nil {
		return err
	}
	tasks, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Task, error) {
		f.Page = sp
		return s.store.ListTasks(r.Context(), f)
	}, store.Task.Cursor, nil)
	if err != nil {
		return fmt.Errorf("list tasks: %w", err)
	}
	out := api.TaskList{Tasks: make([]api.Task, 0, len(tasks)), Next: next}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, t.Wire())
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// resolveTask finds a task and checks the caller's role on its suite.
// resolveTask finds a task whose suite the caller may do what with.
func (s *Server) resolveTask(ctx context.Context, id string, what dispatch.Access) (store.Task, error) {
	return s.dispatcher.ResolveTask(ctx, principalFrom(ctx), id, what)
}

func (s *Server) handleGetTask(w http.ResponseWriter, r *http.Request) error {
	t, err := s.resolveTask(r.Context(), r.PathValue("task"), dispatch.ReadSuite)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, t.Wire())
	return nil
}

func (s *Server) handleCancelTask(w http.ResponseWriter, r *http.Request) error {
	t, err := s.resolveTask(r.Context(), r.PathValue("task"), dispatch.StopSuite)
	if err != nil {
		return err
	}
	if t, err = s.dispatcher.CancelTask(r.Context(), t); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, t.Wire())
	return nil
}

// apiProblems is a suite's problems in their wire form.
func apiProblems(ps []store.SuiteProblem) []api.SuiteProblem {
	out := make([]api.SuiteProblem, len(ps))
	for i, p := range ps {
		out[i] = p.SuiteProblem
	}
	return out
}

// handleClearActionCache empties a scope of the action cache (the path's
// group, else the caller's own), or removes the entry ?key= names.
func (s *Server) handleClearActionCache(w http.ResponseWriter, r *http.Request) error {
	n, err := s.dispatcher.ForgetActions(r.Context(), principalFrom(r.Context()), r.PathValue("group"), r.URL.Query().Get("key"))
	return answer(w, http.StatusOK, api.ActionCacheCleared{Deleted: n}, err)
}
