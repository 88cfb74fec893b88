package accounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// AdminStore is what making the first admin's token needs of the store.
type AdminStore interface {
	ListUsers(ctx context.Context, p store.Page) ([]store.User, error)
	GetUser(ctx context.Context, name string) (store.User, error)
	CreateUser(ctx context.Context, u store.User) error
	CreateToken(ctx context.Context, t store.Token) error
}

// AdminTokenFile is where the first admin token is written, mode 0600.
func AdminTokenFile(dataDir string) string { return filepath.Join(dataDir, "admin-token") }

// Bootstrap creates the admin user and its first API token when the store has
// no users yet, and writes the token to AdminTokenFile. It returns the token
// and whether it was created now; on later starts it returns the token read
// back from the file if it is still there.
func Bootstrap(ctx context.Context, st AdminStore, dataDir string) (token string, created bool, err error) {
	users, err := st.ListUsers(ctx, store.Page{Limit: 1}) // is there any?
	if err != nil {
		return "", false, fmt.Errorf("bootstrap: %w", err)
	}
	path := AdminTokenFile(dataDir)
	if len(users) > 0 {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", false, nil
		}
		return string(trimNL(b)), false, nil
	}
	now := time.Now().UTC()
	if err := st.CreateUser(ctx, store.User{Name: "admin", Admin: true, CreatedAt: now}); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			// Another server on the store bootstrapped at the same moment:
			// the admin's first token is in its data dir.
			return "", false, nil
		}
		return "", false, fmt.Errorf("bootstrap: create admin: %w", err)
	}
	secret, hash := auth.NewSecret(api.TokenAPI)
	t := store.Token{ID: auth.NewID("t-"), Kind: api.TokenAPI, Name: "bootstrap", Hash: hash, User: "admin",
		CreatedAt: now, ExpiresAt: now.Add(DefaultMaxTTL)}
	if err := st.CreateToken(ctx, t); err != nil {
		return "", false, fmt.Errorf("bootstrap: create admin token: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, fmt.Errorf("bootstrap: %w", err)
	}
	// A fresh file, mode 0600, whatever a file already there had: writing
	// over one in place would keep its mode, 0644 say.
	if err := atomicfile.Write(path, []byte(secret+"\n")); err != nil {
		return "", false, fmt.Errorf("bootstrap: write %s: %w", path, err)
	}
	return secret, true, nil
}

// ResetAdminToken gives the user "admin" (made again, as an admin, if it
// was removed) a fresh API token and writes it to AdminTokenFile: the way
// back in for whoever holds the data dir when every admin token expired or
// was lost. It is what nodemgr server --reset-admin-token does.
func ResetAdminToken(ctx context.Context, st AdminStore, dataDir string) (string, error) {
	now := time.Now().UTC()
	u, err := st.GetUser(ctx, "admin")
	switch {
	case errdefs.IsNotFound(err):
		if err := st.CreateUser(ctx, store.User{Name: "admin", Admin: true, CreatedAt: now}); err != nil {
			return "", fmt.Errorf("reset admin token: create admin: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("reset admin token: %w", err)
	case !u.Admin:
		return "", fmt.Errorf("reset admin token: user admin is no longer an admin; make another admin user's token instead: %w", errdefs.ErrConflict)
	}
	secret, hash := auth.NewSecret(api.TokenAPI)
	t := store.Token{ID: auth.NewID("t-"), Kind: api.TokenAPI, Name: "reset", Hash: hash, User: "admin",
		CreatedAt: now, ExpiresAt: now.Add(DefaultMaxTTL)}
	if err := st.CreateToken(ctx, t); err != nil {
		return "", fmt.Errorf("reset admin token: %w", err)
	}
	if err := atomicfile.Write(AdminTokenFile(dataDir), []byte(secret+"\n")); err != nil {
		return "", fmt.Errorf("reset admin token: write %s: %w", AdminTokenFile(dataDir), err)
	}
	return secret, nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
