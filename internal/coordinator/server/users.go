package server

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Default lifetimes of the tokens a user creates.
const (
	defaultAPITokenTTL  = 90 * 24 * time.Hour
	defaultJoinTokenTTL = 24 * time.Hour
)

func apiUser(u store.User) api.User {
	g := u.Groups
	if g == nil {
		g = map[string]string{}
	}
	return api.User{Name: u.Name, Admin: u.Admin, Groups: g, CreatedAt: u.CreatedAt}
}

func apiToken(t store.Token) api.Token {
	out := api.Token{ID: t.ID, Kind: t.Kind, Name: t.Name, User: t.User, NodeID: t.NodeID, CreatedAt: t.CreatedAt,
		Groups: t.Groups, MaxUses: t.MaxUses, Uses: t.Uses}
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt
		out.ExpiresAt = &e
	}
	if !t.LastUsed.IsZero() {
		l := t.LastUsed
		out.LastUsed = &l
	}
	return out
}

func (s *Server) handleListUsers(w http.ResponseWriter, r *http.Request) error {
	if err := principalFrom(r.Context()).RequireAdmin("list users"); err != nil {
		return err
	}
	pg, err := readPage(r.URL.Query(), "users")
	if err != nil {
		return err
	}
	users, next, err := fillPage(pg, func(sp store.Page) ([]store.User, error) {
		return s.store.ListUsers(r.Context(), sp)
	}, store.User.Cursor, nil)
	if err != nil {
		return fmt.Errorf("list users: %w", err)
	}
	out := api.UserList{Users: make([]api.User, 0, len(users)), Next: next}
	for _, u := range users {
		out.Users = append(out.Users, apiUser(u))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func validateMemberships(field string, groups map[string]string) error {
	for g, role := range groups {
		if err := validate.Group(field+"."+g, g); err != nil {
			return err
		}
		if !auth.ValidRole(role) {
			return errdefs.Field(field+"."+g, "role must be Read, Write or Admin, got %q", role)
		}
	}
	return nil
}

func (s *Server) handleCreateUser(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateUserRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := validate.Name("name", req.Name); err != nil {
		return err
	}
	if err := validateMemberships("groups", req.Groups); err != nil {
		return err
	}
	if err := principalFrom(r.Context()).RequireAdmin("create user"); err != nil {
		return err
	}
	u := store.User{Name: req.Name, Admin: req.Admin, Groups: maps.Clone(req.Groups), CreatedAt: time.Now().UTC()}
	if err := s.store.CreateUser(r.Context(), u); err != nil {
		return fmt.Errorf("create user %s: %w", req.Name, err)
	}
	httpapi.WriteJSON(w, http.StatusCreated, apiUser(u))
	return nil
}

func (s *Server) handleDeleteUser(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	if err := p.RequireAdmin("delete user"); err != nil {
		return err
	}
	name := r.PathValue("user")
	if name == p.User {
		return errdefs.Conflict("you cannot delete yourself; ask another admin")
	}
	if err := s.store.DeleteUser(r.Context(), name); err != nil {
		return fmt.Errorf("delete user %s: %w", name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// MembershipRequest is the body of PUT /v1/users/{user}/groups/{group}.
type membershipRequest struct {
	Role string `json:"role"` // Read | Write | Admin | "" to remove
}

func (s *Server) handleSetMembership(w http.ResponseWriter, r *http.Request) error {
	var req membershipRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	group := r.PathValue("group")
	if err := validate.Group("group", group); err != nil {
		return err
	}
	if req.Role != "" && !auth.ValidRole(req.Role) {
		return errdefs.Field("role", "must be Read, Write, Admin or empty (to remove), got %q", req.Role)
	}
	if err := principalFrom(r.Context()).Require(api.RoleAdmin, []string{group}, "change members of group "+group); err != nil {
		return err
	}
	name := r.PathValue("user")
	if err := s.store.SetMembership(r.Context(), name, group, req.Role); err != nil {
		return fmt.Errorf("set role of %s in %s: %w", name, group, err)
	}
	u, err := s.store.GetUser(r.Context(), name)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, apiUser(u))
	return nil
}

// parseTTL reads a token lifetime: def when empty, never more than the
// server's cap.
func (s *Server) parseTTL(ttl string, def time.Duration) (time.Duration, error) {
	if ttl == "" {
		return min(def, s.cfg.MaxTokenTTL), nil
	}
	d, err := time.ParseDuration(ttl)
	if err != nil || d <= 0 {
		return 0, errdefs.Field("ttl", "must be a positive Go duration such as 24h or 720h, at most %s (the server's --max-token-ttl), got %q", s.cfg.MaxTokenTTL, ttl)
	}
	if d > s.cfg.MaxTokenTTL {
		return 0, errdefs.Field("ttl", "at most %s (the server's --max-token-ttl), got %s; ask for a shorter lifetime and rotate the token before it expires", s.cfg.MaxTokenTTL, ttl)
	}
	return d, nil
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if len(req.Groups) > 0 || req.MaxUses != 0 || req.Node != "" {
		return errdefs.Field("groups", "only join tokens take groups, max_uses and node; use POST /v1/join-tokens")
	}
	ttl, err := s.parseTTL(req.TTL, defaultAPITokenTTL)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	user := req.User
	if user == "" {
		user = p.User
	}
	if user != p.User {
		if err := p.RequireAdmin("create a token for another user"); err != nil {
			return err
		}
	}
	if _, err := s.store.GetUser(r.Context(), user); err != nil {
		return fmt.Errorf("create token: user %q: %w", user, err)
	}
	return s.createToken(w, r, store.Token{Kind: api.TokenAPI, Name: req.Name, User: user}, ttl)
}

func (s *Server) handleCreateJoinToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.User != "" {
		return errdefs.Field("user", "join tokens belong to no user")
	}
	if err := validate.Groups("groups", req.Groups); err != nil {
		return err
	}
	if req.MaxUses < 0 {
		return errdefs.Field("max_uses", "must be 0 (unlimited) or more, got %d", req.MaxUses)
	}
	ttl, err := s.parseTTL(req.TTL, defaultJoinTokenTTL)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if req.Node != "" {
		return s.createRejoinToken(w, r, req, ttl)
	}
	// A join token puts nodes into groups; only their admins may do that.
	for _, g := range req.Groups {
		if err := p.Require(api.RoleAdmin, []string{g}, "create a join token for group "+g); err != nil {
			return err
		}
	}
	if len(req.Groups) == 0 {
		if err := p.RequireAdmin("create a join token for nodes in no group"); err != nil {
			return err
		}
	}
	return s.createToken(w, r, store.Token{Kind: api.TokenJoin, Name: req.Name, Groups: req.Groups, MaxUses: req.MaxUses, User: p.User}, ttl)
}

// createRejoinToken makes a join token bound to one existing node: the only
// way besides the node's own credential to re-join it. It hands over a node
// and every group it is in, so only an admin may make one.
func (s *Server) createRejoinToken(w http.ResponseWriter, r *http.Request, req api.CreateTokenRequest, ttl time.Duration) error {
	p := principalFrom(r.Context())
	if len(req.Groups) > 0 {
		return errdefs.Field("groups", "a re-join token keeps the node's groups; leave groups out")
	}
	if err := p.RequireAdmin("create a re-join token for node " + req.Node); err != nil {
		return err
	}
	n, err := s.findNode(r.Context(), req.Node, nil)
	if err != nil {
		return err
	}
	uses := req.MaxUses
	if uses == 0 {
		uses = 1
	}
	return s.createToken(w, r, store.Token{Kind: api.TokenJoin, Name: req.Name, NodeID: n.ID, MaxUses: uses, User: p.User}, ttl)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, t store.Token, ttl time.Duration) error {
	out, err := s.storeNewToken(r.Context(), t, ttl)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// storeNewToken gives t a fresh ID and secret and stores it; the answer
// carries the secret, the only time it is shown.
func (s *Server) storeNewToken(ctx context.Context, t store.Token, ttl time.Duration) (api.Token, error) {
	secret, hash := auth.NewSecret(t.Kind)
	now := time.Now().UTC()
	t.ID, t.Hash, t.CreatedAt, t.ExpiresAt, t.Uses, t.LastUsed = auth.NewID("t-"), hash, now, now.Add(ttl), 0, time.Time{}
	if err := s.store.CreateToken(ctx, t); err != nil {
		return api.Token{}, fmt.Errorf("create token: %w", err)
	}
	out := apiToken(t)
	out.Secret = secret
	if pin := s.caFingerprint(); t.Kind == api.TokenJoin && pin != "" {
		// The agent pins the server's CA by it before it sends the secret.
		out.Secret, out.CAFingerprint = auth.WithPin(secret, pin), pin
	}
	return out, nil
}

// handleRotateToken replaces an API token with a new one of the same name,
// user and lifetime (capped), and revokes the old: the way to keep a
// long-lived token, the first admin's included, from expiring. When the old
// one is in the server's admin-token file, the file gets the new secret.
func (s *Server) handleRotateToken(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	old, err := s.findToken(r.Context(), api.TokenAPI, r.PathValue("token"))
	if err != nil {
		return err
	}
	if old.User != p.User {
		if err := p.RequireAdmin("rotate another user's token"); err != nil {
			return err
		}
	}
	ttl := defaultAPITokenTTL
	if !old.ExpiresAt.IsZero() {
		ttl = old.ExpiresAt.Sub(old.CreatedAt)
	}
	out, err := s.storeNewToken(r.Context(), old, min(ttl, s.cfg.MaxTokenTTL))
	if err != nil {
		return err
	}
	if err := s.store.DeleteToken(r.Context(), old.ID); err != nil {
		// Two live tokens would outlast the rotation: take the new one back.
		s.store.DeleteToken(r.Context(), out.ID)
		return fmt.Errorf("rotate token %s: revoke the old one: %w", old.ID, err)
	}
	if err := s.replaceAdminTokenFile(old, out.Secret); err != nil {
		s.log.Warn("rotated the admin token but could not rewrite the admin-token file; it holds a revoked token now", "err", err)
	}
	s.log.Info("token rotated", "old", old.ID, "new", out.ID, "user", old.User, "by", p.User)
	httpapi.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// replaceAdminTokenFile writes secret to the admin-token file if the file
// holds old's secret.
func (s *Server) replaceAdminTokenFile(old store.Token, secret string) error {
	if s.cfg.DataDir == "" {
		return nil
	}
	path := AdminTokenFile(s.cfg.DataDir)
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(auth.Hash(string(trimNL(b))), old.Hash) {
		return nil
	}
	return atomicfile.Write(path, []byte(secret+"\n"))
}

// findToken finds a token of kind by ID.
func (s *Server) findToken(ctx context.Context, kind, id string) (store.Token, error) {
	tokens, err := s.store.ListTokens(ctx, store.TokenFilter{Kind: kind})
	if err != nil {
		return store.Token{}, err
	}
	for _, t := range tokens {
		if t.ID == id {
			return t, nil
		}
	}
	list := "nodemgr token ls"
	if kind == api.TokenJoin {
		list = "nodemgr join-token ls"
	}
	return store.Token{}, errdefs.NotFound("%s token %q (see %s)", kindName(kind), id, list)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, kind string) error {
	p := principalFrom(r.Context())
	f := store.TokenFilter{Kind: kind}
	if !p.Admin {
		f.User = p.User // non-admins see their own
	}
	pg, err := readPage(r.URL.Query(), "tokens", kind)
	if err != nil {
		return err
	}
	tokens, next, err := fillPage(pg, func(sp store.Page) ([]store.Token, error) {
		f.Page = sp
		return s.store.ListTokens(r.Context(), f)
	}, store.Token.Cursor, nil)
	if err != nil {
		return fmt.Errorf("list tokens: %w", err)
	}
	out := api.TokenList{Tokens: make([]api.Token, 0, len(tokens)), Next: next}
	for _, t := range tokens {
		out.Tokens = append(out.Tokens, apiToken(t))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleListTokens(w http.ResponseWriter, r *http.Request) error {
	return s.listTokens(w, r, api.TokenAPI)
}

func (s *Server) handleListJoinTokens(w http.ResponseWriter, r *http.Request) error {
	return s.listTokens(w, r, api.TokenJoin)
}

func (s *Server) handleDeleteToken(w http.ResponseWriter, r *http.Request) error {
	return s.deleteToken(w, r, api.TokenAPI)
}

func (s *Server) handleDeleteJoinToken(w http.ResponseWriter, r *http.Request) error {
	return s.deleteToken(w, r, api.TokenJoin)
}

// deleteToken revokes a token of one kind: each route deletes its own kind
// only (node credentials go with their node, nodemgr node rm).
func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request, kind string) error {
	p := principalFrom(r.Context())
	t, err := s.findToken(r.Context(), kind, r.PathValue("token"))
	if err != nil {
		return err
	}
	if t.User != p.User {
		if err := p.RequireAdmin("revoke another user's token"); err != nil {
			return err
		}
	}
	if err := s.store.DeleteToken(r.Context(), t.ID); err != nil {
		return fmt.Errorf("revoke token %s: %w", t.ID, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
