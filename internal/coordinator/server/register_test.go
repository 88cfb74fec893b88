package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestJoinTokenCannotTakeOverANode is the audit's takeover: a join token of
// group B, with the victim's machine ID and data dir (both readable by any
// local user), must not adopt the group-A node, add B to its groups or get
// a credential for it.
func TestJoinTokenCannotTakeOverANode(t *testing.T) {
	ts := newTestServer(t)
	victim := api.RegisterRequest{MachineID: "m-victim", DataDir: "/var/lib/nodemgr", Name: "victim", Groups: []string{"a"}}
	code, first, body := ts.register(t, ts.joinToken(t, "a"), victim)
	if code != http.StatusOK {
		t.Fatalf("first registration = %d %s", code, body)
	}

	attack := victim
	attack.Groups = []string{"b"}
	code, rr, body := ts.register(t, ts.joinToken(t, "b"), attack)
	if code != http.StatusConflict {
		t.Fatalf("registration with another group's join token for the same machine = %d %s, want 409", code, body)
	}
	if rr.Credential != "" {
		t.Errorf("a refused registration handed out a credential")
	}
	if !strings.Contains(body, "join-token create --node") {
		t.Errorf("conflict %s does not say how to re-join", body)
	}
	// Not even a join token with no group (an admin's) adopts the node.
	attack.Groups = nil
	if code, _, body := ts.register(t, ts.joinToken(t), attack); code != http.StatusConflict {
		t.Errorf("registration with an unscoped join token = %d %s, want 409", code, body)
	}

	var n api.Node
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/nodes/"+first.NodeID, nil, &n)
	if !slices.Equal(n.Groups, []string{"a"}) {
		t.Errorf("victim's groups = %v after the attempt, want [a]", n.Groups)
	}
	// The victim's own credential still works: it was not replaced.
	code, again, body := ts.register(t, first.Credential, victim)
	if code != http.StatusOK || again.NodeID != first.NodeID {
		t.Fatalf("re-join with the node's own credential = %d %s, want 200 for %s", code, body, first.NodeID)
	}
	// ... and was replaced by the re-join: the old one is spent.
	if code, _, _ := ts.register(t, first.Credential, victim); code != http.StatusUnauthorized {
		t.Errorf("re-join with a replaced credential = %d, want 401", code)
	}
}

// TestRejoin covers the two ways back into an existing node: its own
// credential, and an admin's re-join token bound to it; both from the
// node's own machine and data dir only, and neither changes its groups.
func TestRejoin(t *testing.T) {
	ts := newTestServer(t)
	id, cred := ts.nodeNamed(t, "n1", "a")
	same := api.RegisterRequest{MachineID: "machine-n1", DataDir: "/var/lib/nodemgr", Name: "n1", Groups: []string{"b"}, Tags: []string{"gpu"}}

	other := same
	other.MachineID = "machine-elsewhere"
	if code, _, body := ts.register(t, cred, other); code != http.StatusForbidden {
		t.Errorf("re-join with a node credential from another machine = %d %s, want 403", code, body)
	}

	// Only an admin binds a re-join token, and it takes no groups.
	groupAdmin := ts.user(t, "ga", false, map[string]string{"a": api.RoleAdmin})
	if code, body := ts.call(t, groupAdmin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Node: id}, nil); code != http.StatusForbidden {
		t.Errorf("group admin creating a re-join token = %d %s, want 403", code, body)
	}
	if code, body := ts.call(t, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Node: id, Groups: []string{"b"}}, nil); code != http.StatusBadRequest {
		t.Errorf("re-join token with groups = %d %s, want 400", code, body)
	}
	if code, body := ts.call(t, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Node: "nosuch"}, nil); code != http.StatusNotFound {
		t.Errorf("re-join token for an unknown node = %d %s, want 404", code, body)
	}
	var rejoin api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Node: "n1"}, &rejoin)
	if rejoin.NodeID != id {
		t.Errorf("re-join token's node = %q, want %q", rejoin.NodeID, id)
	}

	// From another machine it is refused, and the use is not spent.
	if code, _, body := ts.register(t, rejoin.Secret, other); code != http.StatusForbidden {
		t.Errorf("re-join token from another machine = %d %s, want 403", code, body)
	}
	code, rr, body := ts.register(t, rejoin.Secret, same)
	if code != http.StatusOK || rr.NodeID != id {
		t.Fatalf("re-join with the bound token = %d %s, want 200 for %s", code, body, id)
	}
	// The fresh credential replaced every token bound to the node, this one too.
	if code, _, body := ts.register(t, rejoin.Secret, same); code != http.StatusUnauthorized {
		t.Errorf("second use of a re-join token = %d %s, want 401", code, body)
	}
	var n api.Node
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/nodes/"+id, nil, &n)
	if !slices.Equal(n.Groups, []string{"a"}) || !slices.Contains(n.Tags, "gpu") {
		t.Errorf("after re-join: groups %v, tags %v; want groups [a] kept and tag gpu added", n.Groups, n.Tags)
	}
}

// TestRefusedRegistrationSpendsNoUse is the audit's 409 that spent a join
// token's use: a registration refused because the machine and data dir
// already have a node leaves the token's uses as they were, so a token of
// two uses still admits a second machine.
func TestRefusedRegistrationSpendsNoUse(t *testing.T) {
	ts := newTestServer(t)
	var tk api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{MaxUses: 2}, &tk)
	uses := func() int {
		var l api.TokenList
		ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/join-tokens", nil, &l)
		for _, x := range l.Tokens {
			if x.ID == tk.ID {
				return x.Uses
			}
		}
		t.Fatalf("join token %s not listed", tk.ID)
		return 0
	}
	first := api.RegisterRequest{MachineID: "m1", DataDir: "/var/lib/nodemgr", Name: "n1"}
	for i, step := range []struct {
		req      api.RegisterRequest
		want     int
		wantUses int
	}{
		{first, http.StatusOK, 1},
		{first, http.StatusConflict, 1},
		{first, http.StatusConflict, 1},
		{api.RegisterRequest{MachineID: "m2", DataDir: "/var/lib/nodemgr", Name: "n2"}, http.StatusOK, 2},
		{api.RegisterRequest{MachineID: "m3", DataDir: "/var/lib/nodemgr", Name: "n3"}, http.StatusForbidden, 2},
	} {
		if code, _, body := ts.register(t, tk.Secret, step.req); code != step.want {
			t.Fatalf("step %d: register %s = %d %s, want %d", i, step.req.MachineID, code, body, step.want)
		}
		if got := uses(); got != step.wantUses {
			t.Errorf("step %d: after registering %s (%d) the token has %d uses, want %d", i, step.req.MachineID, step.want, got, step.wantUses)
		}
	}
	var n api.Node
	if code, _ := ts.call(t, ts.admin, "GET", "/v1/nodes/n3", nil, &n); code != http.StatusNotFound {
		t.Errorf("GET /v1/nodes/n3 after a spent token = %d, want 404: no node", code)
	}
}
