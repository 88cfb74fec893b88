package server

import (
	"fmt"
	"net/http"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func (s *Server) handleListUsers(w http.ResponseWriter, r *http.Request) error {
	if err := principalFrom(r.Context()).RequireAdmin("list users"); err != nil {
		return err
	}
	pg, err := paging.Read(r.URL.Query(), "users")
	if err != nil {
		return err
	}
	users, next, err := paging.Fill(pg, func(sp store.Page) ([]store.User, error) {
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

func (s *Server) handleCreateUser(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateUserRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	u, err := s.accounts.CreateUser(r.Context(), principalFrom(r.Context()), req)
	return answer(w, http.StatusCreated, u, err)
}

func (s *Server) handleDeleteUser(w http.ResponseWriter, r *http.Request) error {
	return noContent(w, s.accounts.DeleteUser(r.Context(), principalFrom(r.Context()), r.PathValue("user")))
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
	u, err := s.accounts.SetMembership(r.Context(), principalFrom(r.Context()), r.PathValue("user"), r.PathValue("group"), req.Role)
	return answer(w, http.StatusOK, u, err)
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	t, err := s.accounts.CreateAPIToken(r.Context(), principalFrom(r.Context()), req)
	return answer(w, http.StatusCreated, t, err)
}

func (s *Server) handleCreateJoinToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	t, err := s.accounts.CreateJoinToken(r.Context(), principalFrom(r.Context()), req)
	return answer(w, http.StatusCreated, t, err)
}

func (s *Server) handleRotateToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.accounts.RotateToken(r.Context(), principalFrom(r.Context()), r.PathValue("token"))
	return answer(w, http.StatusCreated, t, err)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, kind string) error {
	p := principalFrom(r.Context())
	f := store.TokenFilter{Kind: kind}
	if !p.Admin {
		f.User = p.User // non-admins see their own
	}
	pg, err := paging.Read(r.URL.Query(), "tokens", kind)
	if err != nil {
		return err
	}
	tokens, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Token, error) {
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

func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request, kind string) error {
	return noContent(w, s.accounts.RevokeToken(r.Context(), principalFrom(r.Context()), kind, r.PathValue("token")))
}
