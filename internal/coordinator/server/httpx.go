package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/accounts"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// maxBody caps request bodies; nothing the API takes is near it, but for
// task batches, which get maxTaskBody.
const (
	maxBody     = 1 << 20
	maxTaskBody = 64 << 20
	// submitBudgetWait is how long a task batch waits for room in the
	// server's budget of batches in flight before it is told to retry.
	submitBudgetWait = 10 * time.Second
)

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = s.explainStorageFull(err)
	if httpapi.WriteError(w, err) == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
}

// decodeJSON reads a JSON body into v strictly: unknown fields, wrong types,
// trailing data and oversized bodies are errors that name the field.
func decodeJSON(r *http.Request, v any) error { return decodeJSONMax(r, v, maxBody) }

func decodeJSONMax(r *http.Request, v any, max int64) error { return httpapi.Decode(r, v, max) }

// principalKey carries the authenticated principal in a request context.
type principalKey struct{}

func principalFrom(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// bearer extracts the token from "Authorization: Bearer X", the scheme in
// any case.
func bearer(r *http.Request) string { return auth.Bearer(r.Header.Get("Authorization")) }

// authenticate checks the request's token, which must be of kind. It
// returns the stored token.
func (s *Server) authenticate(ctx context.Context, r *http.Request, kind string) (store.Token, error) {
	// A join token may carry the pin of the server's CA; the agent
	// strips it, and so does this, for a token pasted whole.
	secret, _ := auth.SplitPin(bearer(r))
	if secret == "" {
		return store.Token{}, fmt.Errorf("missing token: set NODEMGR_TOKEN or NODEMGR_TOKEN_FILE, or pass --token-file (an admin's first token is in the server's data dir, file admin-token): %w", errdefs.ErrUnauthenticated)
	}
	if got := auth.KindOf(secret); got != kind {
		return store.Token{}, fmt.Errorf("wrong kind of token: this endpoint takes a %s token: %w", accounts.KindName(kind), errdefs.ErrUnauthenticated)
	}
	t, err := s.store.TokenByHash(ctx, auth.Hash(secret))
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Token{}, fmt.Errorf("invalid token: it was revoked or never existed; create a new one: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("authenticate: %w", err)
	}
	if !t.ExpiresAt.IsZero() && time.Now().After(t.ExpiresAt) {
		return store.Token{}, fmt.Errorf("token %s expired at %s; create a new one: %w", t.ID, t.ExpiresAt.Format(time.RFC3339), errdefs.ErrUnauthenticated)
	}
	s.hub.TouchToken(t.ID)
	s.guard.Authenticated(r.Context())
	return t, nil
}

// userPrincipal authenticates an API token and loads its user.
func (s *Server) userPrincipal(ctx context.Context, r *http.Request) (auth.Principal, error) {
	t, err := s.authenticate(ctx, r, api.TokenAPI)
	if err != nil {
		return auth.Principal{}, err
	}
	u, err := s.store.GetUser(ctx, t.User)
	if errdefs.IsNotFound(err) {
		return auth.Principal{}, fmt.Errorf("token's user %q is gone: %w", t.User, errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return auth.Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	return auth.Principal{User: u.Name, Admin: u.Admin, Groups: u.Groups, TokenExpires: t.ExpiresAt}, nil
}

// answer writes v with code, or returns err for writeError to answer.
func answer(w http.ResponseWriter, code int, v any, err error) error {
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, code, v)
	return nil
}

// noContent answers 204, or returns err for writeError to answer.
func noContent(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// queryDuration reads the query parameter name as a Go duration between 0
// and most; absent, 0.
func queryDuration(r *http.Request, name string, most time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > most {
		return 0, errdefs.Field(name, "must be a duration between 0s and %s, e.g. 30s; got %q", most, v)
	}
	return d, nil
}
