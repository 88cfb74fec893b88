package store

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Every API request and agent connection authenticates: it finds its
// token by hash, and an API token's user with the user's groups. Read
// from the store each time, that was a tenth of a busy server's CPU. A SQL
// store keeps what it read in an AuthCache, and every change to tokens,
// users, memberships or nodes empties it:
//
//   - in the process that made the change, at once, when the change has
//     committed (the store's own write methods call Changed);
//   - in other servers on the same PostgreSQL database, when they hear
//     AuthChannel, which a trigger signals at the commit of any such
//     change, whoever made it (another replica, `server
//     --reset-admin-token`, a cascade from a deleted node or user). A
//     server that is not sure it heard every signal (its LISTEN connection
//     dropped) empties its cache too.
//
// An entry also lives at most AuthCacheTTL, so that a change no one
// announced is seen within that time whatever happens. Only what a lookup
// found is kept: an unknown secret is looked up every time, and join
// tokens, whose uses are counted, are never kept.

// AuthChannel is the signal a PostgreSQL store sends when tokens, users,
// memberships or nodes change.
const AuthChannel = "nodemgr_auth"

// AuthCacheTTL is how long a cached token or user is trusted without a
// change being heard.
const AuthCacheTTL = 10 * time.Second

// authCacheMax bounds the entries kept; a full cache starts again empty.
const authCacheMax = 10_000

// AuthCaching is a store that caches credentials: AuthChanged empties the
// cache, for a change made elsewhere (a signal on AuthChannel heard, or
// maybe missed).
type AuthCaching interface {
	AuthChanged()
}

// AuthCache keeps tokens by hash and users by name, as the store last
// read them.
type AuthCache struct {
	gen atomic.Uint64 // moved by every Changed
	now func() time.Time

	mu     sync.Mutex
	tokens map[string]cached[Token]
	users  map[string]cached[User]
}

type cached[T any] struct {
	v    T
	gen  uint64
	read time.Time
}

// NewAuthCache returns an empty cache.
func NewAuthCache() *AuthCache { return &AuthCache{now: time.Now} }

// Changed drops every entry, and every lookup under way: what they read
// may be from before the change.
func (c *AuthCache) Changed() {
	c.gen.Add(1)
	c.mu.Lock()
	c.tokens, c.users = nil, nil
	c.mu.Unlock()
}

// Token returns the token with the secret's hash, from the cache or else
// from read.
func (c *AuthCache) Token(hash []byte, read func() (Token, error)) (Token, error) {
	t, err := lookup(c, &c.tokens, string(hash), read)
	if err != nil {
		return Token{}, err
	}
	t.Groups = slices.Clone(t.Groups)
	return t, nil
}

// User returns the user called name, from the cache or else from read.
func (c *AuthCache) User(name string, read func() (User, error)) (User, error) {
	u, err := lookup(c, &c.users, name, read)
	if err != nil {
		return User{}, err
	}
	u.Groups = maps.Clone(u.Groups)
	return u, nil
}

// lookup answers key from *m while it is fresh, or else reads it and
// keeps it, unless a change came while it was read.
func lookup[T any](c *AuthCache, m *map[string]cached[T], key string, read func() (T, error)) (T, error) {
	gen, now := c.gen.Load(), c.now()
	c.mu.Lock()
	e, ok := (*m)[key]
	c.mu.Unlock()
	if ok && e.gen == gen && now.Sub(e.read) < AuthCacheTTL {
		return e.v, nil
	}
	v, err := read()
	if err != nil || !keep(v) {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen {
		return v, nil // changed meanwhile: v may be from before
	}
	if *m == nil || len(*m) >= authCacheMax {
		*m = map[string]cached[T]{}
	}
	(*m)[key] = cached[T]{v: v, gen: gen, read: now}
	return v, nil
}

// keep says whether a value read may be cached: not a join token, whose
// uses every registration counts.
func keep(v any) bool {
	t, ok := v.(Token)
	return !ok || t.Kind != api.TokenJoin
}
