package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TaskFinder finds a suite's tasks.
type TaskFinder interface {
	GetTask(ctx context.Context, id string) (store.Task, error)
	ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error)
}

// ResolveAfter turns each task's After (IDs or names, of tasks in the
// batch or already in the suite) into task IDs, and refuses names given
// twice and cycles. ids are the batch's new task IDs, in order.
func ResolveAfter(ctx context.Context, st TaskFinder, suiteID string, tasks []store.Task) error {
	byName := map[string]int{}
	byID := map[string]int{}
	for i, t := range tasks {
		byID[t.ID] = i
		if n := t.Spec.Name; n != "" {
			if j, ok := byName[n]; ok {
				return errdefs.Field(fmt.Sprintf("tasks[%d].name", i), "%q is also the name of tasks[%d]; names are unique in a suite", n, j)
			}
			byName[n] = i
		}
	}
	edges := make([][]int, len(tasks)) // dependencies inside the batch
	for i := range tasks {
		t := &tasks[i]
		for k, ref := range t.Spec.After {
			if j, ok := byName[ref]; ok {
				t.After = append(t.After, tasks[j].ID)
				edges[i] = append(edges[i], j)
				continue
			}
			if j, ok := byID[ref]; ok {
				t.After = append(t.After, ref)
				edges[i] = append(edges[i], j)
				continue
			}
			dep, err := TaskInSuite(ctx, st, suiteID, ref)
			if err != nil {
				return errdefs.Field(fmt.Sprintf("tasks[%d].after[%d]", i, k), "%v", err)
			}
			t.After = append(t.After, dep.ID)
		}
	}
	if cycle := findCycle(edges); cycle != nil {
		names := make([]string, len(cycle))
		for k, i := range cycle {
			names[k] = fmt.Sprintf("tasks[%d]", i)
			if n := tasks[i].Spec.Name; n != "" {
				names[k] += " (" + n + ")"
			}
		}
		return errdefs.Field(fmt.Sprintf("tasks[%d].after", cycle[0]), "dependencies form a cycle: %s", strings.Join(names, " → "))
	}
	return nil
}

// TaskInSuite finds a stored task of the suite by ID or name.
func TaskInSuite(ctx context.Context, st TaskFinder, suiteID, ref string) (store.Task, error) {
	if t, err := st.GetTask(ctx, ref); err == nil && t.SuiteID == suiteID {
		return t, nil
	}
	found, err := st.ListTasks(ctx, store.TaskFilter{SuiteID: suiteID, Name: ref, Page: store.Page{Limit: 1}})
	if err != nil {
		return store.Task{}, err
	}
	if len(found) == 0 {
		return store.Task{}, fmt.Errorf("no task %q in this suite or this batch; give a task ID or the name of a task submitted before or with it", ref)
	}
	return found[0], nil
}

// findCycle returns the tasks of a cycle in the dependency graph (first
// one again at the end), or nil when there is none.
func findCycle(edges [][]int) []int {
	const (
		unseen = iota
		onPath
		done
	)
	mark := make([]int, len(edges))
	var path []int
	var visit func(i int) []int
	visit = func(i int) []int {
		mark[i] = onPath
		path = append(path, i)
		for _, j := range edges[i] {
			switch mark[j] {
			case onPath:
				start := slices.Index(path, j)
				return append(slices.Clone(path[start:]), j)
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range edges {
		if mark[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// resolveInputs adds to a claimed task the outputs of the tasks its
// input_from names, as inputs. One that is not there becomes an input
// with an Error, and the agent fails the attempt with it.
func (d *Dispatcher) resolveInputs(ctx context.Context, t *api.Task) {
	for _, in := range t.InputFrom {
		dep, err := TaskInSuite(ctx, d.store, t.SuiteID, in.Task)
		if err != nil {
			t.Inputs = append(t.Inputs, api.TaskFile{Path: orName(in.As, in.Path, in.Task), Error: err.Error()})
			continue
		}
		var outs []api.TaskFile
		if dep.Result != nil {
			outs = dep.Result.Outputs
		}
		found := false
		for _, f := range outs {
			if in.Path != "" && f.Path != in.Path {
				continue
			}
			found = true
			if in.As != "" {
				f.Path = in.As
			}
			t.Inputs = append(t.Inputs, f)
		}
		if !found && in.Path != "" {
			t.Inputs = append(t.Inputs, api.TaskFile{Path: orName(in.As, in.Path, in.Task),
				Error: fmt.Sprintf("task %s produced no output %s", in.Task, in.Path)})
		}
	}
}

func orName(names ...string) string {
	for _, n := range names {
		if n != "" {
			return n
		}
	}
	return ""
}
