package accounts

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// What principals ask of accounts. Each request is checked field by field
// first, then against who asks (p), then done.

// CreateUser makes a user; only admins may.
func (i *Accounts) CreateUser(ctx context.Context, p auth.Principal, req api.CreateUserRequest) (api.User, error) {
	if err := validate.Name("name", req.Name); err != nil {
		return api.User{}, err
	}
	if err := validateMemberships("groups", req.Groups); err != nil {
		return api.User{}, err
	}
	if err := p.RequireAdmin("create user"); err != nil {
		return api.User{}, err
	}
	u := store.User{Name: req.Name, Admin: req.Admin, Groups: maps.Clone(req.Groups), CreatedAt: time.Now().UTC()}
	if err := i.store.CreateUser(ctx, u); err != nil {
		return api.User{}, fmt.Errorf("create user %s: %w", req.Name, err)
	}
	return u.Wire(), nil
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

// DeleteUser removes a user and its tokens; an admin may delete anyone
// but themselves.
func (i *Accounts) DeleteUser(ctx context.Context, p auth.Principal, name string) error {
	if err := p.RequireAdmin("delete user"); err != nil {
		return err
	}
	if name == p.User {
		return errdefs.Conflict("you cannot delete yourself; ask another admin")
	}
	if err := i.store.DeleteUser(ctx, name); err != nil {
		return fmt.Errorf("delete user %s: %w", name, err)
	}
	return nil
}

// SetMembership gives a user a role in a group ("" removes it); the
// group's admins may.
func (i *Accounts) SetMembership(ctx context.Context, p auth.Principal, user, group, role string) (api.User, error) {
	if err := validate.Group("group", group); err != nil {
		return api.User{}, err
	}
	if role != "" && !auth.ValidRole(role) {
		return api.User{}, errdefs.Field("role", "must be Read, Write, Admin or empty (to remove), got %q", role)
	}
	if err := p.Require(api.RoleAdmin, []string{group}, "change members of group "+group); err != nil {
		return api.User{}, err
	}
	if err := i.store.SetMembership(ctx, user, group, role); err != nil {
		return api.User{}, fmt.Errorf("set role of %s in %s: %w", user, group, err)
	}
	u, err := i.store.GetUser(ctx, user)
	return u.Wire(), err
}

// CreateAPIToken makes an API token for the asker, or, for an admin, for
// another user.
func (i *Accounts) CreateAPIToken(ctx context.Context, p auth.Principal, req api.CreateTokenRequest) (api.Token, error) {
	if len(req.Groups) > 0 || req.MaxUses != 0 || req.Node != "" {
		return api.Token{}, errdefs.Field("groups", "only join tokens take groups, max_uses and node; use POST /v1/join-tokens")
	}
	ttl, err := i.ParseTTL(req.TTL, DefaultAPITTL)
	if err != nil {
		return api.Token{}, err
	}
	user := req.User
	if user == "" {
		user = p.User
	}
	if user != p.User {
		if err := p.RequireAdmin("create a token for another user"); err != nil {
			return api.Token{}, err
		}
	}
	if _, err := i.store.GetUser(ctx, user); err != nil {
		return api.Token{}, fmt.Errorf("create token: user %q: %w", user, err)
	}
	return i.Issue(ctx, store.Token{Kind: api.TokenAPI, Name: req.Name, User: user}, ttl)
}

// CreateJoinToken makes a join token that puts new nodes into groups (the
// groups' admins may), or one that re-joins an existing node (admins may).
func (i *Accounts) CreateJoinToken(ctx context.Context, p auth.Principal, req api.CreateTokenRequest) (api.Token, error) {
	if req.User != "" {
		return api.Token{}, errdefs.Field("user", "join tokens belong to no user")
	}
	if err := validate.Groups("groups", req.Groups); err != nil {
		return api.Token{}, err
	}
	if req.MaxUses < 0 {
		return api.Token{}, errdefs.Field("max_uses", "must be 0 (unlimited) or more, got %d", req.MaxUses)
	}
	ttl, err := i.ParseTTL(req.TTL, DefaultJoinTTL)
	if err != nil {
		return api.Token{}, err
	}
	if req.Node != "" {
		return i.createRejoinToken(ctx, p, req, ttl)
	}
	// A join token puts nodes into groups; only their admins may do that.
	for _, g := range req.Groups {
		if err := p.Require(api.RoleAdmin, []string{g}, "create a join token for group "+g); err != nil {
			return api.Token{}, err
		}
	}
	if len(req.Groups) == 0 {
		if err := p.RequireAdmin("create a join token for nodes in no group"); err != nil {
			return api.Token{}, err
		}
	}
	return i.Issue(ctx, store.Token{Kind: api.TokenJoin, Name: req.Name, Groups: req.Groups, MaxUses: req.MaxUses, User: p.User}, ttl)
}

// createRejoinToken makes a join token bound to one existing node: the only
// way besides the node's own credential to re-join it. It hands over a node
// and every group it is in, so only an admin may make one.
func (i *Accounts) createRejoinToken(ctx context.Context, p auth.Principal, req api.CreateTokenRequest, ttl time.Duration) (api.Token, error) {
	if len(req.Groups) > 0 {
		return api.Token{}, errdefs.Field("groups", "a re-join token keeps the node's groups; leave groups out")
	}
	if err := p.RequireAdmin("create a re-join token for node " + req.Node); err != nil {
		return api.Token{}, err
	}
	n, err := store.FindNode(ctx, i.store, req.Node, nil)
	if err != nil {
		return api.Token{}, err
	}
	uses := req.MaxUses
	if uses == 0 {
		uses = 1
	}
	return i.Issue(ctx, store.Token{Kind: api.TokenJoin, Name: req.Name, NodeID: n.ID, MaxUses: uses, User: p.User}, ttl)
}

// RotateToken replaces an API token (the asker's, or for an admin anyone's)
// with a new one of the same name, user and lifetime (capped), and revokes
// the old: the way to keep a long-lived token, the first admin's included,
// from expiring. When the old one is in the server's admin-token file, the
// file gets the new secret.
func (i *Accounts) RotateToken(ctx context.Context, p auth.Principal, id string) (api.Token, error) {
	old, err := i.Find(ctx, api.TokenAPI, id)
	if err != nil {
		return api.Token{}, err
	}
	if old.User != p.User {
		if err := p.RequireAdmin("rotate another user's token"); err != nil {
			return api.Token{}, err
		}
	}
	out, err := i.Rotate(ctx, old)
	if err == nil {
		i.log.Info("token rotated", "old", old.ID, "new", out.ID, "user", old.User, "by", p.User)
	}
	return out, err
}

// RevokeToken deletes a token of one kind (the asker's, or for an admin
// anyone's): each route deletes its own kind only (node credentials go
// with their node, nodemgr node rm).
func (i *Accounts) RevokeToken(ctx context.Context, p auth.Principal, kind, id string) error {
	t, err := i.Find(ctx, kind, id)
	if err != nil {
		return err
	}
	if t.User != p.User {
		if err := p.RequireAdmin("revoke another user's token"); err != nil {
			return err
		}
	}
	if err := i.store.DeleteToken(ctx, t.ID); err != nil {
		return fmt.Errorf("revoke token %s: %w", t.ID, err)
	}
	return nil
}
