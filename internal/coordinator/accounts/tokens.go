// Package accounts keeps the coordinator's users and their tokens: it
// creates and deletes users and their group memberships, issues, finds,
// rotates and revokes tokens (API tokens, join tokens), decides who may
// ask for which, and keeps the first admin's token in the data dir. The
// server authenticates a request and hands its principal here.
package accounts

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Default lifetimes of the tokens a user creates, and the longest one
// unless configured otherwise (the first admin token lives this long too;
// rotate it with nodemgr token rotate).
const (
	DefaultAPITTL  = 90 * 24 * time.Hour
	DefaultJoinTTL = 24 * time.Hour
	DefaultMaxTTL  = 365 * 24 * time.Hour
)

// Config tunes the accounts.
type Config struct {
	MaxTTL  time.Duration // the longest lifetime a token may be given
	DataDir string        // where the admin-token file is; "" none
}

// Store is what accounts need of the store.
type Store interface {
	CreateToken(ctx context.Context, t store.Token) error
	DeleteToken(ctx context.Context, id string) error
	ListTokens(ctx context.Context, f store.TokenFilter) ([]store.Token, error)
	CreateUser(ctx context.Context, u store.User) error
	GetUser(ctx context.Context, name string) (store.User, error)
	DeleteUser(ctx context.Context, name string) error
	SetMembership(ctx context.Context, user, group, role string) error
	store.NodeFinder
}

// Accounts keeps users and makes their tokens.
type Accounts struct {
	cfg   Config
	store Store
	// pin is the fingerprint of the server's CA, "" when it has none: a
	// join token carries it, so the agent pins the CA before it sends
	// the secret.
	pin func() string
	log *slog.Logger
}

// New makes the accounts over st.
func New(cfg Config, st Store, pin func() string, logger *slog.Logger) *Accounts {
	return &Accounts{cfg: cfg, store: st, pin: pin, log: logger}
}

// Rotate replaces a token with a new one of the same name, user and
// lifetime (capped), and revokes the old. When the old one is in the
// admin-token file, the file gets the new secret.
func (i *Accounts) Rotate(ctx context.Context, old store.Token) (api.Token, error) {
	ttl := DefaultAPITTL
	if !old.ExpiresAt.IsZero() {
		ttl = old.ExpiresAt.Sub(old.CreatedAt)
	}
	out, err := i.Issue(ctx, old, min(ttl, i.cfg.MaxTTL))
	if err != nil {
		return api.Token{}, err
	}
	if err := i.store.DeleteToken(ctx, old.ID); err != nil {
		// Two live tokens would outlast the rotation: take the new one back.
		i.store.DeleteToken(ctx, out.ID)
		return api.Token{}, fmt.Errorf("rotate token %s: revoke the old one: %w", old.ID, err)
	}
	if err := i.replaceAdminTokenFile(old, out.Secret); err != nil {
		i.log.Warn("rotated the admin token but could not rewrite the admin-token file; it holds a revoked token now", "err", err)
	}
	return out, nil
}

// ParseTTL reads a token lifetime: def when empty, never more than the
// server's cap.
func (i *Accounts) ParseTTL(ttl string, def time.Duration) (time.Duration, error) {
	if ttl == "" {
		return min(def, i.cfg.MaxTTL), nil
	}
	d, err := time.ParseDuration(ttl)
	if err != nil || d <= 0 {
		return 0, errdefs.Field("ttl", "must be a positive Go duration such as 24h or 720h, at most %s (the server's --max-token-ttl), got %q", i.cfg.MaxTTL, ttl)
	}
	if d > i.cfg.MaxTTL {
		return 0, errdefs.Field("ttl", "at most %s (the server's --max-token-ttl), got %s; ask for a shorter lifetime and rotate the token before it expires", i.cfg.MaxTTL, ttl)
	}
	return d, nil
}

// Issue gives t a fresh ID and secret and stores it; the answer
// carries the secret, the only time it is shown.
func (i *Accounts) Issue(ctx context.Context, t store.Token, ttl time.Duration) (api.Token, error) {
	secret, hash := auth.NewSecret(t.Kind)
	now := time.Now().UTC()
	t.ID, t.Hash, t.CreatedAt, t.ExpiresAt, t.Uses, t.LastUsed = auth.NewID("t-"), hash, now, now.Add(ttl), 0, time.Time{}
	if err := i.store.CreateToken(ctx, t); err != nil {
		return api.Token{}, fmt.Errorf("create token: %w", err)
	}
	out := t.Wire()
	out.Secret = secret
	if pin := i.pin(); t.Kind == api.TokenJoin && pin != "" {
		// The agent pins the server's CA by it before it sends the secret.
		out.Secret, out.CAFingerprint = auth.WithPin(secret, pin), pin
	}
	return out, nil
}

// replaceAdminTokenFile writes secret to the admin-token file if the file
// holds old's secret.
func (i *Accounts) replaceAdminTokenFile(old store.Token, secret string) error {
	if i.cfg.DataDir == "" {
		return nil
	}
	path := AdminTokenFile(i.cfg.DataDir)
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(auth.Hash(string(trimNL(b))), old.Hash) {
		return nil
	}
	return atomicfile.Write(path, []byte(secret+"\n"))
}

// Find finds a token of kind by ID.
func (i *Accounts) Find(ctx context.Context, kind, id string) (store.Token, error) {
	tokens, err := i.store.ListTokens(ctx, store.TokenFilter{Kind: kind})
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
	return store.Token{}, errdefs.NotFound("%s token %q (see %s)", KindName(kind), id, list)
}

// KindName names a kind of token for people.
func KindName(kind string) string {
	switch kind {
	case api.TokenJoin:
		return "join"
	case api.TokenNode:
		return "node credential"
	}
	return "API"
}
