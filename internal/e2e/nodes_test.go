package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

func TestAgentsRegisterAndHeartbeat(t *testing.T) {
	s := startServer(t)
	startAgent(t, s, "alpha", "--tag", "gpu,linux", "--label", "zone=eu-1")
	b := startAgent(t, s, "beta", "--tag", "cpu")
	startAgent(t, s, "gamma")

	for _, name := range []string{"alpha", "beta", "gamma"} {
		waitStatus(t, s, name, api.StatusOnline, 20*time.Second)
	}
	// Online comes with the registration; the agent's connection a moment
	// later.
	var alpha api.Node
	waitFor(t, 20*time.Second, "alpha idle and connected", func() (bool, string) {
		alpha, _ = nodeByName(t, s, "alpha")
		return alpha.AgentState == api.AgentIdle && alpha.Connected, fmt.Sprintf("state %q, connected %v", alpha.AgentState, alpha.Connected)
	})
	if !slices.Equal(alpha.Tags, []string{"gpu", "linux"}) || alpha.Labels["zone"] != "eu-1" {
		t.Errorf("alpha tags, labels = %v, %v; want [gpu linux], zone=eu-1", alpha.Tags, alpha.Labels)
	}
	if alpha.Hardware.Cores <= 0 || alpha.Hardware.MemoryBytes == 0 || alpha.Hardware.DiskBytes == 0 || alpha.Hardware.OS != "linux" {
		t.Errorf("alpha hardware = %+v; want cores, memory, disk and os measured", alpha.Hardware)
	}
	// The credential is saved for the agent's eyes only.
	fi, err := os.Stat(filepath.Join(b.dataDir, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("agent.json mode = %v, want 0600", fi.Mode().Perm())
	}

	// Heartbeats keep arriving: the timestamp moves.
	first := *alpha.LastHeartbeat
	waitFor(t, 10*time.Second, "a newer heartbeat", func() (bool, string) {
		n, _ := nodeByName(t, s, "alpha")
		return n.LastHeartbeat != nil && n.LastHeartbeat.After(first), n.LastHeartbeat.String()
	})

	// Humans get a table, scripts get JSON.
	out, _, code := s.run(t, "node", "ls")
	if code != 0 || !strings.Contains(out, "LAST HEARTBEAT") || len(grep(out, "online")) != 3 {
		t.Errorf("node ls (exit %d):\n%s\nwant a table with 3 online nodes", code, out)
	}
	out, _, code = s.run(t, "node", "ls", "--json")
	var list api.NodeList
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list.Nodes) != 3 {
		t.Errorf("node ls --json = %d nodes (exit %d, %v), want 3", len(list.Nodes), code, err)
	}
	out, _, code = s.run(t, "node", "show", "alpha")
	if code != 0 || !strings.Contains(out, alpha.ID) || !strings.Contains(out, "zone=eu-1") {
		t.Errorf("node show alpha (exit %d):\n%s", code, out)
	}
}

func TestKilledAgentGoesOfflineThenReturnsAsSameNode(t *testing.T) {
	s := startServer(t)
	a := startAgent(t, s, "victim")
	other := startAgent(t, s, "bystander")
	before := waitStatus(t, s, "victim", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "bystander", api.StatusOnline, 20*time.Second)

	killedAt := time.Now()
	a.signal(syscall.SIGKILL)
	a.wait(5 * time.Second)

	// The server sees the connection end: suspect at once, then offline
	// once the reconnect grace is over.
	off := waitStatus(t, s, "victim", api.StatusOffline, 20*time.Second)
	if took := time.Since(killedAt); took < reconnectGrace {
		t.Errorf("offline after %s, before the configured reconnect grace %s", took, reconnectGrace)
	}
	if !strings.Contains(off.StatusReason, "connection lost") || !strings.Contains(off.StatusReason, "not back within") {
		t.Errorf("offline reason = %q, want it to say the connection was lost and the agent did not come back", off.StatusReason)
	}
	if n, _ := nodeByName(t, s, "bystander"); n.Status != api.StatusOnline {
		t.Errorf("bystander status = %s, want online", n.Status)
	}

	a.restart(t)
	back := waitStatus(t, s, "victim", api.StatusOnline, 20*time.Second)
	if back.ID != before.ID {
		t.Errorf("restarted agent is node %s, want the same node %s", back.ID, before.ID)
	}
	nodes, _ := s.client().Nodes(context.Background(), "")
	if len(nodes) != 2 {
		t.Errorf("server knows %d nodes after the restart, want 2 (no duplicate)", len(nodes))
	}
	_ = other
}

func TestServerRestartAgentsReconnect(t *testing.T) {
	s := startServer(t)
	startAgent(t, s, "one")
	startAgent(t, s, "two")
	one := waitStatus(t, s, "one", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "two", api.StatusOnline, 20*time.Second)
	if _, err := s.client().PatchNode(context.Background(), "one", api.NodePatch{AddTags: []string{"kept"}}); err != nil {
		t.Fatal(err)
	}

	s.signal(syscall.SIGTERM)
	if code := s.wait(10 * time.Second); code != 0 {
		t.Errorf("server exited %d on SIGTERM, want 0", code)
	}
	s.restart(t)

	for _, name := range []string{"one", "two"} {
		n := waitStatus(t, s, name, api.StatusOnline, 20*time.Second)
		waitFor(t, 10*time.Second, name+" connected", func() (bool, string) {
			n, _ = nodeByName(t, s, name)
			return n.Connected, ""
		})
	}
	again, _ := nodeByName(t, s, "one")
	if again.ID != one.ID || !slices.Contains(again.Tags, "kept") {
		t.Errorf("after restart node one = %s tags %v; want %s with tag kept", again.ID, again.Tags, one.ID)
	}
	if n, _ := s.client().Nodes(context.Background(), ""); len(n) != 2 {
		t.Errorf("%d nodes after restart, want 2", len(n))
	}
}

func TestShutdownGracefulAndForce(t *testing.T) {
	s := startServer(t)
	g := startAgent(t, s, "gentle")
	f := startAgent(t, s, "hasty")
	waitStatus(t, s, "gentle", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "hasty", api.StatusOnline, 20*time.Second)

	for _, tc := range []struct {
		a    *agent
		name string
		flag string
	}{{g, "gentle", "--graceful"}, {f, "hasty", "--force"}} {
		out, errOut, code := s.run(t, "node", "shutdown", tc.name, tc.flag)
		if code != 0 {
			t.Fatalf("node shutdown %s %s: exit %d: %s%s", tc.name, tc.flag, code, out, errOut)
		}
		if exit := tc.a.wait(15 * time.Second); exit != 0 {
			t.Errorf("agent %s exited %d after %s shutdown, want 0", tc.name, exit, tc.flag)
		}
		n := waitStatus(t, s, tc.name, api.StatusOffline, 10*time.Second)
		mode := strings.TrimPrefix(tc.flag, "--")
		if !strings.Contains(n.StatusReason, mode) {
			t.Errorf("%s offline reason = %q, want it to name %s", tc.name, n.StatusReason, mode)
		}
	}

	// The shutdown was acknowledged: a restarted agent does not obey it again.
	g.restart(t)
	waitStatus(t, s, "gentle", api.StatusOnline, 20*time.Second)
	stable := time.Now().Add(4 * heartbeat)
	for time.Now().Before(stable) {
		if g.exited() {
			t.Fatalf("restarted agent exited again: the shutdown notification was replayed\n%s", g.output())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A node that is not connected is not sent anything.
	_, errOut, code := s.run(t, "node", "shutdown", "hasty", "--force")
	if code == 0 || !strings.Contains(errOut, "not connected") {
		t.Errorf("shutdown of a stopped node: exit %d, stderr %q; want an error saying it is not connected", code, errOut)
	}
}

func TestSecondAgentOnSameDataDirIsRefused(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "first")

	second := start(t, "second", "agent", "--server", s.url(), "--data-dir", a.dataDir, "--name", "second")
	if code := second.wait(10 * time.Second); code == 0 {
		t.Fatalf("second agent on the same data dir exited 0, want a refusal")
	}
	if out := second.output(); !strings.Contains(out, "another nodemgr agent (pid ") || !strings.Contains(out, "--data-dir") {
		t.Errorf("refusal message = %q; want it to say the data dir is in use and how to proceed", out)
	}
	if a.exited() {
		t.Error("the first agent died")
	}
}

func TestTagsAndLabelsReachTheAgentEvenWhileItIsDown(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "edited")

	a.signal(syscall.SIGTERM)
	a.wait(10 * time.Second)
	// Queued in the server's outbox while the agent is away.
	out, errOut, code := s.run(t, "node", "tag", "edited", "--add", "queued")
	if code != 0 {
		t.Fatalf("node tag: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = s.run(t, "node", "label", "edited", "rack=7")
	if code != 0 {
		t.Fatalf("node label: exit %d: %s%s", code, out, errOut)
	}

	a.restart(t)
	waitFor(t, 20*time.Second, "the agent to receive the queued update", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(a.dataDir, "agent.json"))
		if err != nil {
			return false, err.Error()
		}
		var st struct {
			Tags    []string          `json:"tags"`
			Labels  map[string]string `json:"labels"`
			LastSeq uint64            `json:"last_seq"`
		}
		json.Unmarshal(b, &st)
		return slices.Contains(st.Tags, "queued") && st.Labels["rack"] == "7" && st.LastSeq == 2, string(b)
	})
}

// TestResourcesWhileTheAgentIsAway: the server keeps a copy of each node's
// books, so `node resources` answers, with the books' age, while the agent
// is not connected.
func TestResourcesWhileTheAgentIsAway(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "away")
	var live api.NodeResources
	waitFor(t, 30*time.Second, "the node's books", func() (bool, string) {
		var err error
		live, err = s.client().Resources(context.Background(), "away")
		return err == nil && live.Onboarded, fmt.Sprint(err)
	})
	if live.AsOf != nil {
		t.Errorf("live books have as_of %v, want none", live.AsOf)
	}
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	waitStatus(t, s, "away", api.StatusOffline, 20*time.Second)

	out, stderr, code := s.run(t, "node", "resources", "away")
	if code != 0 {
		t.Fatalf("node resources of a node whose agent is away: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "not connected") || !strings.Contains(out, "last reported") || !strings.Contains(out, "offered") {
		t.Errorf("node resources while away said:\n%s\nwant the last books, marked as the agent's last report", out)
	}
	kept, err := s.client().Resources(context.Background(), "away")
	if err != nil || kept.AsOf == nil || kept.Offered != live.Offered {
		t.Errorf("Resources while away = offered %+v as of %v (%v), want the live books %+v with their age", kept.Offered, kept.AsOf, err, live.Offered)
	}
}

// TestAgentFailsOverAmongServers: an agent given several server URLs
// (a coordinator's replicas) goes on to the next when one does not answer,
// registers there and stays; after a restart it keeps its credential,
// since the server it registered with is still in its list.
func TestAgentFailsOverAmongServers(t *testing.T) {
	s := startServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing answers there now
	a, first := startOnline(t, s, "fo", "--server", dead+","+s.url())

	a.signal(syscall.SIGTERM)
	a.wait(10 * time.Second)
	a.restart(t)
	waitFor(t, 20*time.Second, "fo connected again", func() (bool, string) {
		n, _ := nodeByName(t, s, "fo")
		return n.Connected, n.Status
	})
	if n, _ := s.client().Nodes(context.Background(), ""); len(n) != 1 || n[0].ID != first.ID {
		t.Errorf("nodes after the restart: %+v; want the one node %s, not a new registration", n, first.ID)
	}

	_, stderr, code := s.run(t, "agent", "--server", s.url()+",https://127.0.0.1:1", "--data-dir", t.TempDir(), "--name", "mixed")
	if code == 0 || !strings.Contains(stderr, "differ in scheme") {
		t.Errorf("agent with an http and an https replica: exit %d, %q; want refused, saying they differ in scheme", code, stderr)
	}
}
