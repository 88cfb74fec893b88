// Package auth makes and checks nodemgr's credentials and decides who may do
// what. Secrets are random, shown once, and stored only as SHA-256 hashes
// (they carry 256 bits of entropy, so a slow password hash buys nothing).
//
// Permissions follow the Mitosis model: a user holds a role (Read < Write <
// Admin) in groups; a node belongs to groups; a user's power over a node is
// the highest role they hold in a group the node is in. Superusers (admin
// users) hold every permission.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Secret prefixes say what kind of credential a string is, so a leaked one is
// recognisable (and secret scanners can match it).
var prefixes = map[string]string{
	api.TokenAPI:  "nmu_",
	api.TokenJoin: "nmj_",
	api.TokenNode: "nmn_",
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewSecret returns a fresh secret of the given token kind and its hash.
func NewSecret(kind string) (secret string, hash []byte) {
	var b [32]byte
	rand.Read(b[:])
	secret = prefixes[kind] + strings.ToLower(b32.EncodeToString(b[:]))
	return secret, Hash(secret)
}

// Hash is the stored form of a secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// KindOf tells the kind of credential from its prefix, or "".
func KindOf(secret string) string {
	for kind, p := range prefixes {
		if strings.HasPrefix(secret, p) {
			return kind
		}
	}
	return ""
}

// SplitPin splits a join token as the server hands it out, "<secret>.<pin>",
// into the secret the server checks and the pin of the server's CA
// ("sha256:<hex>"; "" when the token carries none). Other credentials come
// back whole: only join tokens carry a pin.
func SplitPin(token string) (secret, pin string) {
	if KindOf(token) != api.TokenJoin {
		return token, ""
	}
	secret, pin, _ = strings.Cut(token, ".")
	return secret, pin
}

// WithPin is a join token carrying the pin of the server's CA, for agents to
// verify the server by before they send it anything.
func WithPin(secret, pin string) string {
	if pin == "" {
		return secret
	}
	return secret + "." + pin
}

// Bearer extracts the token of an Authorization header's value, "Bearer
// TOKEN". The scheme is case-insensitive (RFC 7235, section 2.1: "bearer"
// and "BEARER" are the same scheme) and the space after it may be several;
// anything else is no token (""). Every reader of the header, the server's
// API and WebSocket and the agent's local API, goes through here.
func Bearer(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// NewID returns a short random identifier with a prefix, e.g. "n-3kd9x2m1qa".
func NewID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + strings.ToLower(b32.EncodeToString(b[:]))[:12]
}

// roleRank orders the roles; 0 is no role.
func roleRank(role string) int {
	switch role {
	case api.RoleRead:
		return 1
	case api.RoleWrite:
		return 2
	case api.RoleAdmin:
		return 3
	}
	return 0
}

// ValidRole reports whether role names a role.
func ValidRole(role string) bool { return roleRank(role) > 0 }

// Principal is whoever makes a request.
type Principal struct {
	User   string
	Admin  bool              // superuser
	Groups map[string]string // group → role
	NodeID string            // set when a node credential authenticated
	// TokenExpires is when the API token that authenticated expires (zero:
	// never); whoami tells it, for clients that warn before it does.
	TokenExpires time.Time
}

// Can reports whether p holds at least role in one of groups.
func (p Principal) Can(role string, groups []string) bool {
	if p.Admin {
		return true
	}
	want := roleRank(role)
	for _, g := range groups {
		if roleRank(p.Groups[g]) >= want {
			return true
		}
	}
	return false
}

// Require is Can that returns an errdefs.ErrPermission saying what was missing.
func (p Principal) Require(role string, groups []string, what string) error {
	if p.Can(role, groups) {
		return nil
	}
	if len(groups) == 0 {
		return fmt.Errorf("%s: only an admin may do this (the object has no groups): %w", what, errdefs.ErrPermission)
	}
	return fmt.Errorf("%s: needs role %s in one of groups %s; ask an admin to grant it: %w",
		what, role, strings.Join(groups, ","), errdefs.ErrPermission)
}

// RequireAdmin allows superusers only.
func (p Principal) RequireAdmin(what string) error {
	if p.Admin {
		return nil
	}
	return fmt.Errorf("%s: only an admin may do this: %w", what, errdefs.ErrPermission)
}
