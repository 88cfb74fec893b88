package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

func TestGroupRolesLimitWhatUsersSeeAndDo(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	admin := s.client()

	mlJoin, err := admin.CreateJoinToken(ctx, api.CreateTokenRequest{Groups: []string{"ml"}})
	if err != nil {
		t.Fatal(err)
	}
	ml := start(t, "agent ml", "agent", "--server", s.url(), "--data-dir", t.TempDir(), "--name", "ml-node",
		"--join-token", mlJoin.Secret, "--reconnect-min", "100ms", "--reconnect-max", "500ms")
	startAgent(t, s, "ops-node", "--group", "ops")
	waitStatus(t, s, "ml-node", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "ops-node", api.StatusOnline, 20*time.Second)

	if _, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "reader", Groups: map[string]string{"ml": api.RoleRead}}); err != nil {
		t.Fatal(err)
	}
	tk, err := admin.CreateToken(ctx, api.CreateTokenRequest{User: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	reader := client.New(s.addr, tk.Secret)

	nodes, err := reader.Nodes(ctx, "")
	if err != nil || len(nodes) != 1 || nodes[0].Name != "ml-node" {
		t.Fatalf("reader sees %v (%v); want only ml-node", nodes, err)
	}
	if _, err := reader.Node(ctx, "ops-node"); statusOf(err) != http.StatusNotFound {
		t.Errorf("reader GET ops-node = %v; want 404 (not even its existence)", err)
	}
	if _, err := reader.PatchNode(ctx, "ml-node", api.NodePatch{AddTags: []string{"x"}}); statusOf(err) != http.StatusForbidden {
		t.Errorf("reader tagging ml-node = %v; want 403 (Read is not Write)", err)
	}
	if _, err := reader.ShutdownNode(ctx, "ml-node", api.ShutdownForce); statusOf(err) != http.StatusForbidden {
		t.Errorf("reader shutting down ml-node = %v; want 403", err)
	}
	if _, err := reader.Users(ctx); statusOf(err) != http.StatusForbidden {
		t.Errorf("reader listing users = %v; want 403", err)
	}

	// Promote to Write: tagging works, shutdown still needs Admin.
	if _, err := admin.SetRole(ctx, "reader", "ml", api.RoleWrite); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.PatchNode(ctx, "ml-node", api.NodePatch{AddTags: []string{"x"}}); err != nil {
		t.Errorf("writer tagging ml-node = %v; want success", err)
	}
	if _, err := reader.ShutdownNode(ctx, "ml-node", api.ShutdownForce); statusOf(err) != http.StatusForbidden {
		t.Errorf("writer shutting down ml-node = %v; want 403", err)
	}
	if ml.exited() {
		t.Error("ml agent exited although no shutdown was allowed")
	}

	// A join token scoped to ml cannot smuggle a node into ops.
	bad := start(t, "agent sneaky", "agent", "--server", s.url(), "--data-dir", t.TempDir(), "--name", "sneaky",
		"--join-token", mlJoin.Secret, "--group", "ops")
	if code := bad.wait(10 * time.Second); code == 0 {
		t.Error("agent joining ops with an ml join token exited 0")
	}

	// Revoking a user's token locks them out at once.
	if err := admin.DeleteToken(ctx, tk.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Nodes(ctx, ""); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("revoked token = %v; want 401", err)
	}
}

func TestAgentRenewsItsCredential(t *testing.T) {
	s := startServer(t, "--credential-ttl", "2s")
	began := time.Now()
	a, _ := startOnline(t, s, "renewer")
	first := readCredential(t, a)

	waitFor(t, 20*time.Second, "a renewed credential", func() (bool, string) {
		c := readCredential(t, a)
		return c != "" && c != first, c
	})
	// Well past the first credential's lifetime, the agent is still welcome,
	// and it reconnects with the renewed credential after a restart.
	waitFor(t, 10*time.Second, "the first credential to expire", func() (bool, string) {
		return time.Since(began) > 3*time.Second, ""
	})
	a.signal(9)
	a.wait(5 * time.Second)
	a.args = withoutJoinToken(a.args) // it must not need to register again
	a.restart(t)
	waitFor(t, 20*time.Second, "renewer reconnected", func() (bool, string) {
		n, _ := nodeByName(t, s, "renewer")
		return n.Connected && n.Status == api.StatusOnline, n.Status
	})
}

func readCredential(t *testing.T, a *agent) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.dataDir, "agent.json"))
	if err != nil {
		return ""
	}
	var st struct {
		Credential string `json:"credential"`
	}
	json.Unmarshal(b, &st)
	return st.Credential
}

func withoutJoinToken(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--join-token" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

func statusOf(err error) int {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Status
	}
	return 0
}
