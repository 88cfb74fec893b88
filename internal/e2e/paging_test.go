package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// tableIDs is the first column of a table's rows, header left out.
func tableIDs(out string) []string {
	var ids []string
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if i > 0 && line != "" {
			ids = append(ids, strings.Fields(line)[0])
		}
	}
	return ids
}

func taskIDsOf(tasks []api.Task) []string {
	var ids []string
	for _, tk := range tasks {
		ids = append(ids, tk.ID)
	}
	return ids
}

var nextPage = regexp.MustCompile(`--after (\S+)`)

// TestTaskLsPagesPastAThousand is issue 12's item 14: `task ls` stopped at
// 1,000 rows with no hint and no cursor. Now a table that is one page of
// more says so on stderr with the cursor of the next page, --after walks
// on from it, and --all shows every task.
func TestTaskLsPagesPastAThousand(t *testing.T) {
	s := startServer(t)
	createSuite(t, s, api.SuiteSpec{Name: "big", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	specs := make([]api.TaskSpec, 1500)
	for i := range specs {
		specs[i] = api.TaskSpec{Argv: []string{"echo", fmt.Sprint(i)}}
	}
	ids := submit(t, s, "big", specs)

	out, stderr, code := s.run(t, "task", "ls", "--suite", "big")
	first := tableIDs(out)
	m := nextPage.FindStringSubmatch(stderr)
	if code != 0 || len(first) != 1000 || !strings.Contains(stderr, "showing 1000") || m == nil {
		t.Fatalf("task ls = exit %d, %d rows, stderr %q; want 1000 rows and a hint with the next page", code, len(first), stderr)
	}
	out, stderr, code = s.run(t, "task", "ls", "--suite", "big", "--after", m[1])
	if rest := tableIDs(out); code != 0 || !slices.Equal(append(first, rest...), ids) || stderr != "" {
		t.Errorf("task ls and task ls --after = %d+%d rows (exit %d, stderr %q), want the 1500 tasks in order and no hint", len(first), len(rest), code, stderr)
	}
	out, stderr, code = s.run(t, "task", "ls", "--suite", "big", "--all")
	if all := tableIDs(out); code != 0 || !slices.Equal(all, ids) || stderr != "" {
		t.Errorf("task ls --all = %d rows (exit %d, stderr %q), want the 1500 tasks in order and no hint", len(all), code, stderr)
	}

	// The Go client's list methods read every page.
	if all, err := s.client().Tasks(context.Background(), "big", ""); err != nil || !slices.Equal(taskIDsOf(all), ids) {
		t.Errorf("client Tasks(big) = %d tasks, %v; want the 1500 in order", len(all), err)
	}

	out, _, code = s.run(t, "task", "ls", "--suite", "big", "--limit", "10", "--json")
	var page api.TaskList
	if err := json.Unmarshal([]byte(out), &page); err != nil || code != 0 || len(page.Tasks) != 10 || page.Next == "" {
		t.Errorf("task ls --limit 10 --json = %d tasks, next %q, %v; want 10 and a next", len(page.Tasks), page.Next, err)
	}
	if _, stderr, code := s.run(t, "task", "ls", "--suite", "big", "--limit", "0"); code == 0 || !strings.Contains(stderr, "--limit") {
		t.Errorf("task ls --limit 0 = exit %d, stderr %q; want an error naming --limit", code, stderr)
	}
	if _, stderr, code := s.run(t, "task", "ls", "--suite", "big", "--after", "nonsense"); code == 0 || !strings.Contains(stderr, "after") {
		t.Errorf("task ls --after nonsense = exit %d, stderr %q; want an error naming after", code, stderr)
	}
}
