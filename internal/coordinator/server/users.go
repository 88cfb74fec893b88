package server

import (
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/tokens"
)

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
		out.Users = append(out.Users, u.Wire())
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
	httpapi.WriteJSON(w, http.StatusCreated, u.Wire())
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
	httpapi.WriteJSON(w, http.StatusOK, u.Wire())
	return nil
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if len(req.Groups) > 0 || req.MaxUses != 0 || req.Node != "" {
		return errdefs.Field("groups", "only join tokens take groups, max_uses and node; use POST /v1/join-tokens")
	}
	ttl, err := s.tokens.ParseTTL(req.TTL, tokens.DefaultAPITTL)
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
	ttl, err := s.tokens.ParseTTL(req.TTL, tokens.DefaultJoinTTL)
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
	n, err := store.FindNode(r.Context(), s.store, req.Node, nil)
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
	out, err := s.tokens.Issue(r.Context(), t, ttl)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// handleRotateToken replaces an API token with a new one of the same name,
// user and lifetime (capped), and revokes the old: the way to keep a
// long-lived token, the first admin's included, from expiring. When the old
// one is in the server's admin-token file, the file gets the new secret.
func (s *Server) handleRotateToken(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	old, err := s.tokens.Find(r.Context(), api.TokenAPI, r.PathValue("token"))
	if err != nil {
		return err
	}
	if old.User != p.User {
		if err := p.RequireAdmin("rotate another user's token"); err != nil {
			return err
		}
	}
	out, err := s.tokens.Rotate(r.Context(), old)
	if err != nil {
		return err
	}
	s.log.Info("token rotated", "old", old.ID, "new", out.ID, "user", old.User, "by", p.User)
	httpapi.WriteJSON(w, http.StatusCreated, out)
	return nil
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
		out.Tokens = append(out.Tokens, t.Wire())
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// deleteToken revokes a token of one kind: each route deletes its own kind
// only (node credentials go with their node, nodemgr node rm).
func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request, kind string) error {
	p := principalFrom(r.Context())
	t, err := s.tokens.Find(r.Context(), kind, r.PathValue("token"))
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
