package dispatch

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// The action cache answers a task that opts in (api.TaskSpec.Cached) with
// the result of an earlier task that ran the same action and succeeded,
// instead of running it: the answer of sccache, ccache and Bazel's remote
// cache to the same compile run again for every clean tree.
//
// The key is known only once a task is claimed, since input_from names
// outputs that exist only when the task's dependencies are done. So the
// dispatcher looks claimed tasks up before it hands them out: a hit is
// finished at once, as the node that claimed it, with the cached result
// (marked CachedFrom), and never reaches the agent; a miss goes out, and
// its key is kept until its report, whose success is cached. Only
// successes are cached: a failure may be the machine's, not the action's.
//
// Entries are scoped to the suite's group, or to its owner for a suite in
// no group: a result is never shared with someone who could not have read
// the task that produced it. A report that comes to another server than
// the one that handed the task out (after a reconnect) is simply not
// cached.

// actionSuite is what a suite adds to its tasks' action keys.
type actionSuite struct {
	on    bool   // the suite caches its tasks (a task may say otherwise)
	scope string // where its entries live
	salt  string // the digest of what the suite runs its tasks with
}

// actionKeyVersion changes the key of every action when what goes into it
// changes.
const actionKeyVersion = "nodemgr-action-v1"

// actionSuiteOf is su's part of its tasks' action keys.
func actionSuiteOf(su store.Suite) actionSuite {
	b, _ := json.Marshal(struct {
		V      string
		Worker []string
		Hooks  api.Hooks
		RunAs  string
	}{actionKeyVersion, su.Spec.WorkerSchedule.WorkerCommand, su.Spec.Hooks, su.Spec.RunAs})
	h := sha256.Sum256(b)
	return actionSuite{on: su.Spec.Cache, scope: actionScope(su.Spec.Group, su.Owner), salt: hex.EncodeToString(h[:])}
}

// actionScope is where the cache keeps the results of a suite's tasks:
// its group's, or its owner's when it is in none.
func actionScope(group, owner string) string {
	if group == "" {
		return "user:" + owner
	}
	return "group:" + group
}

// ForgetActions empties a scope of the action cache, or removes one key
// of it: group's (Write there), or with group "" the caller's own, of
// their suites outside groups. It says how many entries went; the tasks
// they answered run again.
func (d *Dispatcher) ForgetActions(ctx context.Context, p auth.Principal, group, key string) (int, error) {
	if group != "" {
		if err := p.Require(api.RoleWrite, []string{group}, "clear group "+group+"'s action cache"); err != nil {
			return 0, err
		}
	}
	return d.store.DeleteCachedActions(ctx, actionScope(group, p.User), key)
}

// actionKey is the digest of the action a claimed task runs: its command,
// environment, working directory, input files and output globs, with its
// suite's salt. "" when the task is not to be cached, or has an input it
// cannot stage (its attempt fails as it should, never from the cache).
func actionKey(as actionSuite, t api.Task) string {
	if t.Cache != nil && !*t.Cache || t.Cache == nil && !as.on {
		return ""
	}
	type file struct {
		Path, Digest string
		Mode         uint32
	}
	inputs := make([]file, len(t.Inputs))
	for i, f := range t.Inputs {
		if f.Error != "" || f.Digest == "" {
			return ""
		}
		inputs[i] = file{f.Path, f.Digest, f.Mode}
	}
	slices.SortFunc(inputs, func(a, b file) int { return cmp.Compare(a.Path, b.Path) })
	// encoding/json writes map keys sorted: the environment's order does
	// not matter.
	b, err := json.Marshal(struct {
		Salt    string
		Argv    []string
		Env     map[string]string
		Workdir string
		Inputs  []file
		Outputs []string
	}{as.salt, t.Argv, t.Env, t.Workdir, inputs, t.Outputs})
	if err != nil {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// actionCache is what the dispatcher remembers of the cache: suites' parts
// of keys, and the keys of tasks handed out, until their reports.
type actionCache struct {
	mu      sync.Mutex
	suites  map[string]actionSuite // by suite ID; a suite's spec does not change
	pending map[string]pendingAction
}

// pendingAction is a task handed out that a success would cache.
type pendingAction struct {
	attempt    int
	scope, key string
}

// actionCacheMax bounds what the cache remembers; past it, it starts over
// (a task handed out before is then not cached: no harm).
const actionCacheMax = 100_000

// suite returns the suite's part of its tasks' keys, reading the suite
// once.
func (d *Dispatcher) actionSuite(ctx context.Context, suiteID string) (actionSuite, error) {
	c := &d.actions
	c.mu.Lock()
	as, ok := c.suites[suiteID]
	c.mu.Unlock()
	if ok {
		return as, nil
	}
	su, err := d.store.GetSuite(ctx, suiteID)
	if err != nil {
		return actionSuite{}, err
	}
	as = actionSuiteOf(su)
	c.mu.Lock()
	if c.suites == nil || len(c.suites) >= actionCacheMax {
		c.suites = map[string]actionSuite{}
	}
	c.suites[suiteID] = as
	c.mu.Unlock()
	return as, nil
}

// answerFromCache finishes the claimed tasks whose actions the cache
// holds, as the node that claimed them, and returns the others, to run.
// It says how many it finished. A cache that fails to answer is a miss:
// the tasks run.
func (d *Dispatcher) answerFromCache(ctx context.Context, sess Session, suiteID string, tasks []api.Task) ([]api.Task, int) {
	as, err := d.actionSuite(ctx, suiteID)
	if err != nil {
		d.log.Warn("action cache: read the suite; running its tasks", "suite", suiteID, "err", err)
		return tasks, 0
	}
	keys := make([]string, len(tasks))
	var asked []string
	for i, t := range tasks {
		if keys[i] = actionKey(as, t); keys[i] != "" {
			asked = append(asked, keys[i])
		}
	}
	if len(asked) == 0 {
		return tasks, 0
	}
	found, err := d.store.CachedActions(ctx, as.scope, asked)
	if err != nil {
		d.log.Warn("action cache: look up; running the tasks", "suite", suiteID, "err", err)
		found = nil
	}
	now := time.Now().UTC()
	var hits []store.Attempt
	run := tasks[:0:0]
	d.actions.mu.Lock()
	for i, t := range tasks {
		e, hit := found[keys[i]]
		switch {
		case hit:
			res := e.Result
			res.NodeID, res.FinishedAt, res.CachedFrom = sess.Node(), now, e.TaskID
			hits = append(hits, store.Attempt{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeSucceeded, Result: res})
		case keys[i] != "":
			if d.actions.pending == nil || len(d.actions.pending) >= actionCacheMax {
				d.actions.pending = map[string]pendingAction{}
			}
			d.actions.pending[t.ID] = pendingAction{attempt: t.Attempt, scope: as.scope, key: keys[i]}
			fallthrough
		default:
			run = append(run, t)
		}
	}
	d.actions.mu.Unlock()
	d.metrics.cacheMisses.Add(float64(len(asked) - len(hits)))
	if len(hits) == 0 {
		return run, 0
	}
	done, err := d.store.FinishAttempts(ctx, sess.Node(), hits, d.retryPolicy)
	if err != nil {
		// They stay Running on the node, which does not know of them: run
		// them after all.
		d.log.Warn("action cache: finish the tasks it answered; running them", "suite", suiteID, "err", err)
		return tasks, 0
	}
	d.Changes.Notify(suiteID)
	d.metrics.cacheHits.Add(float64(done.Applied))
	d.metrics.tasksReported.Add(float64(done.Applied))
	d.stopSuperseded(ctx, done.Superseded)
	for _, id := range done.Released {
		d.SuiteChanged(ctx, id)
	}
	return run, len(hits)
}

// cacheSucceeded stores the results of the reported attempts that
// succeeded and whose keys the dispatcher kept when it handed them out.
func (d *Dispatcher) cacheSucceeded(ctx context.Context, attempts []store.Attempt) {
	byScope := map[string]map[string]store.CachedAction{}
	d.actions.mu.Lock()
	for _, a := range attempts {
		p, ok := d.actions.pending[a.TaskID]
		if !ok || p.attempt != a.Attempt {
			continue
		}
		delete(d.actions.pending, a.TaskID)
		if a.Outcome != api.OutcomeSucceeded || a.Result.ExitCode != 0 || len(a.Result.Missing) > 0 {
			continue
		}
		res := a.Result
		res.NodeID, res.FinishedAt, res.CachedFrom = "", time.Time{}, ""
		if byScope[p.scope] == nil {
			byScope[p.scope] = map[string]store.CachedAction{}
		}
		byScope[p.scope][p.key] = store.CachedAction{Result: res, TaskID: a.TaskID}
	}
	d.actions.mu.Unlock()
	for scope, entries := range byScope {
		if err := d.store.CacheActions(ctx, scope, entries); err != nil {
			d.log.Warn("action cache: store results; they run again next time", "tasks", len(entries), "err", err)
		}
	}
}

// forgetPending drops the kept keys of tasks given back unstarted.
func (d *Dispatcher) forgetPending(ids []string) {
	d.actions.mu.Lock()
	for _, id := range ids {
		delete(d.actions.pending, id)
	}
	d.actions.mu.Unlock()
}
