package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

// TestSpotNoticeDrainsTheNode: an agent whose machine gets a spot
// interruption notice (from a fake instance metadata service speaking
// IMDSv2) stops taking tasks, gives back those it had not started (they
// run on another node), lets those it runs finish, and the node shows it
// drains and why. No task is run twice, none is lost.
func TestSpotNoticeDrainsTheNode(t *testing.T) {
	md := ec2test.NewIMDS(t)
	s := startServer(t)
	_, spotty := startOnline(t, s, "spotty", "--tag", "pool", "--imds", md.URL, "--imds-interval", "50ms")
	waitFor(t, 10*time.Second, "the agent to read the metadata service", func() (bool, string) {
		return md.Calls("GET", ec2test.IMDSActionPath) > 0, "no reads"
	})

	const n = 20
	createSuite(t, s, api.SuiteSpec{Name: "spot", Tags: []string{"pool"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(16)}})
	// Each run of task i adds a line to marks/i: one line each at the end
	// means none ran twice.
	marks := sharedDir(t)
	var tasks []api.TaskSpec
	for i := range n {
		tasks = append(tasks, sh(fmt.Sprintf("echo run >>%s/%d; sleep 0.5", marks, i)))
	}
	submit(t, s, "spot", tasks)
	s.client().CloseSuite(context.Background(), "spot")
	waitFor(t, 30*time.Second, "two tasks running on spotty", func() (bool, string) {
		started, _ := os.ReadDir(marks)
		return len(started) >= 2, fmt.Sprintf("%d started", len(started))
	})

	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	md.NoticeInterruption("terminate", at)
	reason := "spot interruption: terminate at " + at.Format(time.RFC3339)
	var shown api.Node
	waitFor(t, 10*time.Second, "spotty to show it drains", func() (bool, string) {
		var err error
		shown, err = s.client().Node(context.Background(), spotty.ID)
		return err == nil && shown.AgentState == api.AgentDraining && shown.StatusReason == reason,
			fmt.Sprintf("state %q, reason %q, notices %v, %v", shown.AgentState, shown.StatusReason, shown.Notices, err)
	})
	if len(shown.Notices) != 1 || shown.Notices[0].Kind != api.NoticeInterruption || !shown.Notices[0].Time.Equal(at) {
		t.Errorf("node notices = %+v, want the interruption at %s", shown.Notices, at)
	}
	// What started on spotty started before it drained: nothing after.
	startedBefore, _ := os.ReadDir(marks)

	startAgent(t, s, "steady", "--tag", "pool")
	su := waitSuite(t, s, "spot", api.SuiteComplete, 2*time.Minute)
	if su.Counts.Finished != n || su.Counts.Total() != n {
		t.Errorf("suite after the notice: %+v; want all %d Finished", su.Counts, n)
	}
	onSpotty := 0
	for _, tk := range allTasks(t, s, "spot") {
		if tk.NodeID == spotty.ID {
			onSpotty++
		}
	}
	if onSpotty == 0 || onSpotty > len(startedBefore) {
		t.Errorf("spotty finished %d tasks; want those it ran when the notice came (1 to %d), and no more", onSpotty, len(startedBefore))
	}
	for i := range n {
		b, err := os.ReadFile(filepath.Join(marks, fmt.Sprint(i)))
		if runs := strings.Count(string(b), "run"); err != nil || runs != 1 {
			t.Errorf("task %d ran %d times (%v), want once", i, runs, err)
		}
	}
	if n, _ := nodeByName(t, s, "spotty"); n.AgentState != api.AgentDraining || n.Status != api.StatusOnline {
		t.Errorf("spotty after the suite: %s %s, want online and still draining (it takes no new work)", n.Status, n.AgentState)
	}
}
