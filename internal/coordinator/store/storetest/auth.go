package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// hash is the stored hash of the secret of the token with the given ID.
func hash(id string) []byte {
	h := sha256.Sum256([]byte("secret-" + id))
	return h[:]
}

func apiToken(id, user string) store.Token {
	return store.Token{ID: id, Kind: api.TokenAPI, Name: id, Hash: hash(id), User: user, Groups: []string{}, CreatedAt: t0}
}

func joinToken(id string, maxUses int) store.Token {
	return store.Token{ID: id, Kind: api.TokenJoin, Hash: hash(id), Groups: []string{"ml"}, MaxUses: maxUses, CreatedAt: t0}
}

func nodeToken(id, nodeID string) store.Token {
	return store.Token{ID: id, Kind: api.TokenNode, Hash: hash(id), NodeID: nodeID, Groups: []string{}, CreatedAt: t0}
}

func mustCreateUser(t *testing.T, s store.Store, u store.User) {
	t.Helper()
	if err := s.CreateUser(t.Context(), u); err != nil {
		t.Fatalf("CreateUser(%q) = %v, want nil", u.Name, err)
	}
}

func mustGetUser(t *testing.T, s store.Store, name string) store.User {
	t.Helper()
	u, err := s.GetUser(t.Context(), name)
	if err != nil {
		t.Fatalf("GetUser(%q) = %v, want nil", name, err)
	}
	return u
}

func mustCreateToken(t *testing.T, s store.Store, tok store.Token) {
	t.Helper()
	if err := s.CreateToken(t.Context(), tok); err != nil {
		t.Fatalf("CreateToken(%q) = %v, want nil", tok.ID, err)
	}
}

func mustTokenByHash(t *testing.T, s store.Store, id string) store.Token {
	t.Helper()
	tok, err := s.TokenByHash(t.Context(), hash(id))
	if err != nil {
		t.Fatalf("TokenByHash(hash of %s) = %v, want nil", id, err)
	}
	return tok
}

func tokenIDs(tokens []store.Token) []string {
	return idsOf(tokens, func(tok store.Token) string { return tok.ID })
}

func testUsers(t *testing.T, s store.Store) {
	if got, err := s.ListUsers(t.Context(), store.Page{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListUsers() on an empty store = %#v, %v, want empty, not nil", got, err)
	}

	bob := store.User{Name: "bob"}
	alice := store.User{Name: "alice", Admin: true, Groups: map[string]string{"ml": api.RoleAdmin, "web": api.RoleRead}, CreatedAt: t0}
	mustCreateUser(t, s, bob)
	mustCreateUser(t, s, alice)

	if diff := cmp.Diff(alice, mustGetUser(t, s, "alice")); diff != "" {
		t.Errorf("GetUser(%q) mismatch (-want +got):\n%s", "alice", diff)
	}
	gotBob := mustGetUser(t, s, "bob")
	if gotBob.Groups == nil || len(gotBob.Groups) != 0 {
		t.Errorf("GetUser(%q).Groups = %#v, want empty, not nil", "bob", gotBob.Groups)
	}
	if !recent(gotBob.CreatedAt) {
		t.Errorf("GetUser(%q).CreatedAt = %v, want about now", "bob", gotBob.CreatedAt)
	}

	got, err := s.ListUsers(t.Context(), store.Page{})
	if err != nil {
		t.Fatalf("ListUsers() = %v, want nil", err)
	}
	if diff := cmp.Diff([]store.User{alice, gotBob}, got); diff != "" {
		t.Errorf("ListUsers() mismatch (-want +got):\n%s", diff)
	}

	if _, err := s.GetUser(t.Context(), "carol"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetUser(%q) = %v, want %v", "carol", err, errdefs.ErrNotFound)
	}
}

func testCreateUserConflict(t *testing.T, s store.Store) {
	first := store.User{Name: "alice", Groups: map[string]string{"ml": api.RoleRead}, CreatedAt: t0}
	mustCreateUser(t, s, first)
	err := s.CreateUser(t.Context(), store.User{Name: "alice", Admin: true, Groups: map[string]string{"web": api.RoleAdmin}})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CreateUser(%q) again = %v, want %v", "alice", err, errdefs.ErrConflict)
	}
	if diff := cmp.Diff(first, mustGetUser(t, s, "alice")); diff != "" {
		t.Errorf("GetUser(%q) after a clash changed (-want +got):\n%s", "alice", diff)
	}
	if err := s.CreateUser(t.Context(), store.User{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("CreateUser(%q) = %v, want %v", "", err, errdefs.ErrInvalid)
	}
}

func testSetMembership(t *testing.T, s store.Store) {
	mustCreateUser(t, s, store.User{Name: "alice", Groups: map[string]string{"ml": api.RoleRead}})
	steps := []struct {
		group, role string
		want        map[string]string
	}{
		{"ml", api.RoleWrite, map[string]string{"ml": api.RoleWrite}},
		{"web", api.RoleAdmin, map[string]string{"ml": api.RoleWrite, "web": api.RoleAdmin}},
		{"ml", "", map[string]string{"web": api.RoleAdmin}},
		{"ml", "", map[string]string{"web": api.RoleAdmin}}, // removing again is fine
		{"web", "", map[string]string{}},
	}
	for _, st := range steps {
		if err := s.SetMembership(t.Context(), "alice", st.group, st.role); err != nil {
			t.Fatalf("SetMembership(%q, %q, %q) = %v, want nil", "alice", st.group, st.role, err)
		}
		got := mustGetUser(t, s, "alice").Groups
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("GetUser(%q).Groups after SetMembership(%q, %q) mismatch (-want +got):\n%s", "alice", st.group, st.role, diff)
		}
	}
	for _, role := range []string{api.RoleRead, ""} {
		if err := s.SetMembership(t.Context(), "ghost", "ml", role); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("SetMembership(%q, %q, %q) = %v, want %v", "ghost", "ml", role, err, errdefs.ErrNotFound)
		}
	}
}

func testDeleteUser(t *testing.T, s store.Store) {
	mustCreateUser(t, s, store.User{Name: "alice", Groups: map[string]string{"ml": api.RoleAdmin}})
	mustCreateUser(t, s, store.User{Name: "bob"})
	mustCreateToken(t, s, apiToken("a1", "alice"))
	mustCreateToken(t, s, apiToken("a2", "alice"))
	mustCreateToken(t, s, apiToken("b1", "bob"))

	if err := s.DeleteUser(t.Context(), "alice"); err != nil {
		t.Fatalf("DeleteUser(%q) = %v, want nil", "alice", err)
	}
	if _, err := s.GetUser(t.Context(), "alice"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetUser(%q) after delete = %v, want %v", "alice", err, errdefs.ErrNotFound)
	}
	for _, id := range []string{"a1", "a2"} {
		if _, err := s.TokenByHash(t.Context(), hash(id)); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("TokenByHash(hash of %s) after its user's delete = %v, want %v", id, err, errdefs.ErrNotFound)
		}
	}
	got, err := s.ListTokens(t.Context(), store.TokenFilter{})
	if err != nil {
		t.Fatalf("ListTokens() = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"b1"}, tokenIDs(got)); diff != "" {
		t.Errorf("ListTokens() after DeleteUser(%q) mismatch (-want +got):\n%s", "alice", diff)
	}
	if err := s.DeleteUser(t.Context(), "alice"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteUser(%q) again = %v, want %v", "alice", err, errdefs.ErrNotFound)
	}

	// A new user of the same name starts with nothing.
	mustCreateUser(t, s, store.User{Name: "alice"})
	if got := mustGetUser(t, s, "alice").Groups; len(got) != 0 {
		t.Errorf("GetUser(%q).Groups of a new user under an old name = %v, want none", "alice", got)
	}
}

func testTokens(t *testing.T, s store.Store) {
	mustCreateUser(t, s, store.User{Name: "alice"})
	mustCreateNode(t, s, newNode("n1"))
	tests := []struct {
		name string
		tok  store.Token
	}{
		{"api", store.Token{
			ID: "t-api", Kind: api.TokenAPI, Name: "ci", Hash: hash("t-api"), User: "alice", Groups: []string{},
			ExpiresAt: t0.Add(720 * time.Hour), CreatedAt: t0, LastUsed: t0.Add(time.Hour),
		}},
		{"join", store.Token{
			ID: "t-join", Kind: api.TokenJoin, Hash: hash("t-join"), Groups: []string{"ml", "gpu"},
			MaxUses: 10, Uses: 2, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0,
		}},
		{"node", nodeToken("t-node", "n1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustCreateToken(t, s, tc.tok)
			if diff := cmp.Diff(tc.tok, mustTokenByHash(t, s, tc.tok.ID)); diff != "" {
				t.Errorf("TokenByHash(hash of %s) mismatch (-want +got):\n%s", tc.tok.ID, diff)
			}
		})
	}

	// Nil groups and a zero creation time.
	mustCreateToken(t, s, store.Token{ID: "bare", Kind: api.TokenJoin, Hash: hash("bare")})
	bare := mustTokenByHash(t, s, "bare")
	if bare.Groups == nil || len(bare.Groups) != 0 {
		t.Errorf("TokenByHash(hash of bare).Groups = %#v, want empty, not nil", bare.Groups)
	}
	if !recent(bare.CreatedAt) || !bare.ExpiresAt.IsZero() || !bare.LastUsed.IsZero() {
		t.Errorf("TokenByHash(hash of bare) created %v, expires %v, last used %v; want now, zero, zero",
			bare.CreatedAt, bare.ExpiresAt, bare.LastUsed)
	}

	if _, err := s.TokenByHash(t.Context(), hash("ghost")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TokenByHash(hash of ghost) = %v, want %v", err, errdefs.ErrNotFound)
	}
}

func testCreateTokenErrors(t *testing.T, s store.Store) {
	mustCreateUser(t, s, store.User{Name: "alice"})
	mustCreateToken(t, s, apiToken("t1", "alice"))
	taken := apiToken("t2", "alice")
	taken.Hash = hash("t1")
	noID := apiToken("", "alice")
	noID.Hash = hash("no-id")

	tests := []struct {
		name string
		tok  store.Token
		want error
	}{
		{"id taken", apiToken("t1", "alice"), errdefs.ErrConflict},
		{"hash taken", taken, errdefs.ErrConflict},
		{"no such user", apiToken("t3", "ghost"), errdefs.ErrNotFound},
		{"no such node", nodeToken("t4", "ghost"), errdefs.ErrNotFound},
		{"no id", noID, errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.CreateToken(t.Context(), tc.tok); !errors.Is(err, tc.want) {
				t.Errorf("CreateToken(%q) = %v, want %v", tc.tok.ID, err, tc.want)
			}
		})
	}
	got, err := s.ListTokens(t.Context(), store.TokenFilter{})
	if err != nil {
		t.Fatalf("ListTokens() = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"t1"}, tokenIDs(got)); diff != "" {
		t.Errorf("ListTokens() after refused creates mismatch (-want +got):\n%s", diff)
	}
}

func testListTokens(t *testing.T, s store.Store) {
	if got, err := s.ListTokens(t.Context(), store.TokenFilter{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListTokens() on an empty store = %#v, %v, want empty, not nil", got, err)
	}
	mustCreateUser(t, s, store.User{Name: "alice"})
	mustCreateUser(t, s, store.User{Name: "bob"})
	mustCreateNode(t, s, newNode("n1"))
	mustCreateNode(t, s, newNode("n2"))
	// Created out of ID order: lists go oldest first, then by ID.
	for i, tok := range []store.Token{
		nodeToken("nd2", "n2"),
		nodeToken("nd1", "n1"),
		joinToken("j1", 0),
		apiToken("b1", "bob"),
		apiToken("a1", "alice"),
		apiToken("a0", "alice"),
	} {
		tok.CreatedAt = t0.Add(-time.Duration(i) * time.Second)
		if tok.ID == "a0" {
			tok.CreatedAt = t0.Add(-4 * time.Second) // the same as a1
		}
		mustCreateToken(t, s, tok)
	}
	tests := []struct {
		filter store.TokenFilter
		want   []string
	}{
		{store.TokenFilter{}, []string{"a0", "a1", "b1", "j1", "nd1", "nd2"}},
		{store.TokenFilter{Kind: api.TokenAPI}, []string{"a0", "a1", "b1"}},
		{store.TokenFilter{User: "alice"}, []string{"a0", "a1"}},
		{store.TokenFilter{NodeID: "n1"}, []string{"nd1"}},
		{store.TokenFilter{Kind: api.TokenNode, NodeID: "n2"}, []string{"nd2"}},
		{store.TokenFilter{Kind: api.TokenJoin, User: "alice"}, []string{}},
		{store.TokenFilter{Kind: "nope"}, []string{}},
	}
	for _, tc := range tests {
		got, err := s.ListTokens(t.Context(), tc.filter)
		checkListed(t, fmt.Sprintf("ListTokens(%+v)", tc.filter), got, err, tokenIDs, tc.want)
	}
}

func testDeleteToken(t *testing.T, s store.Store) {
	mustCreateToken(t, s, joinToken("j1", 0))
	mustCreateToken(t, s, joinToken("j2", 0))
	if err := s.DeleteToken(t.Context(), "j1"); err != nil {
		t.Fatalf("DeleteToken(%q) = %v, want nil", "j1", err)
	}
	if _, err := s.TokenByHash(t.Context(), hash("j1")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TokenByHash(hash of j1) after delete = %v, want %v", err, errdefs.ErrNotFound)
	}
	mustTokenByHash(t, s, "j2")
	if err := s.DeleteToken(t.Context(), "j1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteToken(%q) again = %v, want %v", "j1", err, errdefs.ErrNotFound)
	}
}

func testUseJoinToken(t *testing.T, s store.Store) {
	mustCreateUser(t, s, store.User{Name: "alice"})
	expiring := joinToken("expiring", 0)
	expiring.ExpiresAt = t0
	mustCreateToken(t, s, joinToken("twice", 2))
	mustCreateToken(t, s, joinToken("unlimited", 0))
	mustCreateToken(t, s, expiring)
	mustCreateToken(t, s, apiToken("api", "alice"))

	// Steps run in order against the same tokens.
	steps := []struct {
		id       string
		now      time.Time
		want     error
		wantUses int
	}{
		{"twice", t0, nil, 1},
		{"twice", t0.Add(time.Second), nil, 2},
		{"twice", t0.Add(2 * time.Second), errdefs.ErrPermission, 2},
		{"unlimited", t0, nil, 1},
		{"unlimited", t0, nil, 2},
		{"unlimited", t0, nil, 3},
		{"expiring", t0.Add(-time.Second), nil, 1},
		{"expiring", t0, errdefs.ErrPermission, 1}, // expires at t0: spent at t0
		{"expiring", t0.Add(time.Hour), errdefs.ErrPermission, 1},
		{"api", t0, errdefs.ErrPermission, 0},
		{"ghost", t0, errdefs.ErrNotFound, 0},
	}
	for _, st := range steps {
		got, err := s.UseJoinToken(t.Context(), st.id, st.now)
		if !wantErr(err, st.want) {
			t.Errorf("UseJoinToken(%q, %v) = %v, want %v", st.id, st.now, err, st.want)
			continue
		}
		if st.want == nil && (got.ID != st.id || got.Uses != st.wantUses || !got.LastUsed.Equal(st.now)) {
			t.Errorf("UseJoinToken(%q, %v) = ID %q, uses %d, last used %v; want %q, %d, %v",
				st.id, st.now, got.ID, got.Uses, got.LastUsed, st.id, st.wantUses, st.now)
		}
		if st.id == "ghost" {
			continue
		}
		if stored := mustTokenByHash(t, s, st.id); stored.Uses != st.wantUses {
			t.Errorf("TokenByHash(hash of %s).Uses after UseJoinToken at %v = %d, want %d", st.id, st.now, stored.Uses, st.wantUses)
		}
	}
}

func testUseJoinTokenConcurrent(t *testing.T, s store.Store) {
	const maxUses, tries = 5, 20
	mustCreateToken(t, s, joinToken("j1", maxUses))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   int
		perm int
	)
	for range tries {
		wg.Go(func() {
			_, err := s.UseJoinToken(t.Context(), "j1", t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, errdefs.ErrPermission):
				perm++
			default:
				t.Errorf("UseJoinToken(%q) = %v, want nil or %v", "j1", err, errdefs.ErrPermission)
			}
		})
	}
	wg.Wait()
	if ok != maxUses || perm != tries-maxUses {
		t.Errorf("UseJoinToken(%q) from %d goroutines: %d succeeded, %d refused; want %d, %d", "j1", tries, ok, perm, maxUses, tries-maxUses)
	}
	if got := mustTokenByHash(t, s, "j1").Uses; got != maxUses {
		t.Errorf("TokenByHash(hash of j1).Uses = %d, want %d", got, maxUses)
	}
}

func testTouchTokens(t *testing.T, s store.Store) {
	mustCreateToken(t, s, joinToken("t1", 0))
	mustCreateToken(t, s, joinToken("t2", 0))
	mustCreateToken(t, s, joinToken("t3", 0))
	if err := s.TouchTokens(t.Context(), nil); err != nil {
		t.Errorf("TouchTokens(nil) = %v, want nil", err)
	}
	steps := []struct {
		used map[string]time.Time
		want map[string]time.Time // last used after the step; absent: never
	}{
		{
			map[string]time.Time{"t1": t0.Add(time.Hour), "t2": t0, "ghost": t0},
			map[string]time.Time{"t1": t0.Add(time.Hour), "t2": t0},
		},
		{
			// Times only move forward: touches may arrive out of order.
			map[string]time.Time{"t1": t0, "t2": t0.Add(time.Minute)},
			map[string]time.Time{"t1": t0.Add(time.Hour), "t2": t0.Add(time.Minute)},
		},
	}
	for i, st := range steps {
		if err := s.TouchTokens(t.Context(), st.used); err != nil {
			t.Fatalf("TouchTokens(step %d) = %v, want nil", i, err)
		}
		for _, id := range []string{"t1", "t2", "t3"} {
			if got := mustTokenByHash(t, s, id).LastUsed; !got.Equal(st.want[id]) {
				t.Errorf("after TouchTokens(step %d): TokenByHash(hash of %s).LastUsed = %v, want %v", i, id, got, st.want[id])
			}
		}
	}
}

func testReplaceNodeCredential(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	mustCreateNode(t, s, newNode("n2"))
	mustCreateToken(t, s, nodeToken("c1", "n1"))
	mustCreateToken(t, s, nodeToken("c2", "n1"))
	mustCreateToken(t, s, nodeToken("c3", "n2"))

	if err := s.ReplaceNodeCredential(t.Context(), nodeToken("c4", "n1")); err != nil {
		t.Fatalf("ReplaceNodeCredential(%q for %q) = %v, want nil", "c4", "n1", err)
	}
	tests := []struct {
		node string
		want []string
	}{
		{"n1", []string{"c4"}},
		{"n2", []string{"c3"}},
	}
	for _, tc := range tests {
		got, err := s.ListTokens(t.Context(), store.TokenFilter{NodeID: tc.node})
		if err != nil {
			t.Fatalf("ListTokens(node %s) = %v, want nil", tc.node, err)
		}
		if diff := cmp.Diff(tc.want, tokenIDs(got)); diff != "" {
			t.Errorf("ListTokens(node %s) after ReplaceNodeCredential mismatch (-want +got):\n%s", tc.node, diff)
		}
	}
	for _, id := range []string{"c1", "c2"} {
		if _, err := s.TokenByHash(t.Context(), hash(id)); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("TokenByHash(hash of %s) after replace = %v, want %v", id, err, errdefs.ErrNotFound)
		}
	}
	if diff := cmp.Diff(nodeToken("c4", "n1"), mustTokenByHash(t, s, "c4")); diff != "" {
		t.Errorf("TokenByHash(hash of c4) mismatch (-want +got):\n%s", diff)
	}

	// Replacing the credential again with one of the same ID works: the old
	// one is gone first.
	again := nodeToken("c4", "n1")
	again.Hash = hash("c4-rotated")
	if err := s.ReplaceNodeCredential(t.Context(), again); err != nil {
		t.Errorf("ReplaceNodeCredential(%q for %q) again = %v, want nil", again.ID, "n1", err)
	}

	refused := []struct {
		name string
		tok  store.Token
		want error
	}{
		{"no such node", nodeToken("c5", "ghost"), errdefs.ErrNotFound},
		{"no node", nodeToken("c6", ""), errdefs.ErrInvalid},
	}
	for _, tc := range refused {
		if err := s.ReplaceNodeCredential(t.Context(), tc.tok); !errors.Is(err, tc.want) {
			t.Errorf("ReplaceNodeCredential(%q for %q) = %v, want %v", tc.tok.ID, tc.tok.NodeID, err, tc.want)
		}
		if _, err := s.TokenByHash(t.Context(), tc.tok.Hash); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("TokenByHash(hash of %s) after a refused replace = %v, want %v", tc.tok.ID, err, errdefs.ErrNotFound)
		}
	}
}

// testJoinNode: a join token's use is spent in the node's own transaction,
// so a refused registration (the audit's 409) leaves the token as it was,
// and a spent or expired token creates no node.
func testJoinNode(t *testing.T, s store.Store) {
	mustCreateToken(t, s, joinToken("twice", 2))
	expired := joinToken("expired", 0)
	expired.ExpiresAt = t0
	mustCreateToken(t, s, expired)
	node := func(id, machine string) store.Node {
		n := newNode(id)
		n.MachineID, n.DataDir = machine, "/d"
		return n
	}
	// Steps run in order against the same tokens.
	for _, st := range []struct {
		token    string
		node     store.Node
		want     error
		wantUses int
	}{
		{"twice", node("n1", "m1"), nil, 1},
		{"twice", node("n2", "m1"), errdefs.ErrConflict, 1}, // m1's node is there: no use spent
		{"twice", node("n3", "m2"), nil, 2},
		{"twice", node("n4", "m3"), errdefs.ErrPermission, 2}, // spent: no node
		{"expired", node("n5", "m4"), errdefs.ErrPermission, 0},
		{"ghost", node("n6", "m5"), errdefs.ErrNotFound, 0},
	} {
		got, err := s.JoinNode(t.Context(), st.token, t0, st.node)
		if !wantErr(err, st.want) {
			t.Errorf("JoinNode(%q, %s on %s) = %v, want %v", st.token, st.node.ID, st.node.MachineID, err, st.want)
			continue
		}
		if st.want == nil && (got.ID != st.node.ID || got.MachineID != st.node.MachineID) {
			t.Errorf("JoinNode(%q, %s) = node %s on %s", st.token, st.node.ID, got.ID, got.MachineID)
		}
		if _, err := s.GetNode(t.Context(), st.node.ID); (err == nil) != (st.want == nil) {
			t.Errorf("GetNode(%s) after JoinNode = %v; want it stored only when JoinNode succeeded", st.node.ID, err)
		}
		if st.token == "ghost" {
			continue
		}
		if stored := mustTokenByHash(t, s, st.token); stored.Uses != st.wantUses {
			t.Errorf("TokenByHash(hash of %s).Uses after JoinNode(%s on %s) = %d, want %d", st.token, st.node.ID, st.node.MachineID, stored.Uses, st.wantUses)
		}
	}
}

// testAuthChangesSeenAtOnce: a store may cache what requests authenticate
// with (store.AuthCache); every change to tokens, users, memberships and
// nodes is seen by the very next lookup, each read once before the
// change so that a cache would hold it.
func testAuthChangesSeenAtOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	gone := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s = %v, want %v", what, err, errdefs.ErrNotFound)
		}
	}
	mustCreateUser(t, s, store.User{Name: "ann", Groups: map[string]string{"ml": api.RoleRead}})
	mustCreateUser(t, s, store.User{Name: "bob"})
	mustCreateToken(t, s, apiToken("ta", "ann"))
	mustCreateToken(t, s, apiToken("tb", "bob"))
	if _, err := s.CreateNode(ctx, store.Node{ID: "n1", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateNode(ctx, store.Node{ID: "n2", MachineID: "m2", DataDir: "/d"}); err != nil {
		t.Fatal(err)
	}
	mustCreateToken(t, s, nodeToken("c1", "n1"))
	mustCreateToken(t, s, nodeToken("c2", "n2"))
	for _, id := range []string{"ta", "tb", "c1", "c2"} {
		mustTokenByHash(t, s, id)
	}
	mustGetUser(t, s, "ann")
	mustGetUser(t, s, "bob")

	if err := s.SetMembership(ctx, "ann", "ml", api.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if got := mustGetUser(t, s, "ann").Groups["ml"]; got != api.RoleAdmin {
		t.Errorf("ann's role in ml after SetMembership = %q, want %q", got, api.RoleAdmin)
	}
	if err := s.DeleteToken(ctx, "ta"); err != nil {
		t.Fatal(err)
	}
	_, err := s.TokenByHash(ctx, hash("ta"))
	gone("TokenByHash(ta) after DeleteToken", err)
	if err := s.DeleteUser(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	_, err = s.TokenByHash(ctx, hash("tb"))
	gone("TokenByHash(tb) after DeleteUser(bob)", err)
	_, err = s.GetUser(ctx, "bob")
	gone("GetUser(bob) after DeleteUser", err)
	if err := s.ReplaceNodeCredential(ctx, nodeToken("c1b", "n1")); err != nil {
		t.Fatal(err)
	}
	_, err = s.TokenByHash(ctx, hash("c1"))
	gone("TokenByHash(c1) after ReplaceNodeCredential", err)
	mustTokenByHash(t, s, "c1b")
	if err := s.DeleteNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	_, err = s.TokenByHash(ctx, hash("c2"))
	gone("TokenByHash(c2) after DeleteNode(n2)", err)

	// A cached value is the caller's own: changing it changes no later
	// answer.
	u := mustGetUser(t, s, "ann")
	u.Groups["ops"] = api.RoleAdmin
	if got := mustGetUser(t, s, "ann").Groups; len(got) != 1 {
		t.Errorf("ann's groups after a caller changed its copy = %v, want only ml", got)
	}
}
