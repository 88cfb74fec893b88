package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// CreateUser stores a new user and its group memberships.
func (s *Store) CreateUser(ctx context.Context, u store.User) error {
	if u.Name == "" {
		return fmt.Errorf("create user: %w", errdefs.Field("name", "required"))
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO users (name, admin, created_at) VALUES ($1, $2, $3)`,
			u.Name, u.Admin, sqlrow.OrNow(u.CreatedAt, s.d.Now()).UnixNano())
		if s.d.IsUnique(err) {
			return errdefs.Conflict("already exists")
		}
		if err != nil {
			return err
		}
		for _, group := range slices.Sorted(maps.Keys(u.Groups)) {
			if err := s.setMembership(ctx, tx, u.Name, group, u.Groups[group]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create user %s: %w", u.Name, err)
	}
	return nil
}

// GetUser returns a user with its memberships.
func (s *Store) GetUser(ctx context.Context, name string) (store.User, error) {
	return s.auth.User(name, func() (store.User, error) { return s.readUser(ctx, name) })
}

func (s *Store) readUser(ctx context.Context, name string) (store.User, error) {
	users, err := s.users(ctx, name, store.Page{})
	if err == nil && len(users) == 0 {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return store.User{}, fmt.Errorf("get user %s: %w", name, err)
	}
	return users[0], nil
}

// ListUsers returns a page of users, ordered by name.
func (s *Store) ListUsers(ctx context.Context, p store.Page) ([]store.User, error) {
	users, err := s.users(ctx, "", p)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return users, nil
}

// users reads the user called name, or a page of every user if name is
// empty, with their memberships from one snapshot.
func (s *Store) users(ctx context.Context, name string, p store.Page) ([]store.User, error) {
	var after string
	if p.After != "" {
		if err := store.DecodeCursor(p.After, &after); err != nil {
			return nil, err
		}
	}
	var users []store.User
	err := s.d.Read(ctx, func(tx Querier) error {
		var err error
		users, err = s.readUsers(ctx, tx, name, after, p)
		if err != nil || len(users) == 0 {
			return err
		}
		return s.readMemberships(ctx, tx, users)
	})
	return users, err
}

func (s *Store) readUsers(ctx context.Context, tx Querier, name, after string, p store.Page) ([]store.User, error) {
	a := args{name, after}
	rows, err := tx.Query(ctx, `SELECT name, admin, created_at FROM users
		WHERE ($1 = '' OR name = $1) AND name > $2 ORDER BY name`+a.limit(p), a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	users := []store.User{}
	for rows.Next() {
		u := store.User{Groups: map[string]string{}}
		var created int64
		if err := rows.Scan(&u.Name, &u.Admin, &created); err != nil {
			return nil, err
		}
		u.CreatedAt = sqlrow.FromNanos(created)
		users = append(users, u)
	}
	return users, rows.Err()
}

// readMemberships fills in the groups of users, a range of names in order.
func (s *Store) readMemberships(ctx context.Context, tx Querier, users []store.User) error {
	index := make(map[string]int, len(users))
	for i, u := range users {
		index[u.Name] = i
	}
	rows, err := tx.Query(ctx, `SELECT user_name, group_name, role FROM memberships
		WHERE user_name BETWEEN $1 AND $2`, users[0].Name, users[len(users)-1].Name)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var user, group, role string
		if err := rows.Scan(&user, &group, &role); err != nil {
			return err
		}
		if i, ok := index[user]; ok {
			users[i].Groups[group] = role
		}
	}
	return rows.Err()
}

// SetMembership sets a user's role in a group; an empty role removes it.
func (s *Store) SetMembership(ctx context.Context, user, group, role string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM users WHERE name = $1`, user).Scan(&one)
		if s.d.NoRows(err) {
			return errdefs.ErrNotFound
		}
		if err != nil {
			return err
		}
		return s.setMembership(ctx, tx, user, group, role)
	})
	s.auth.Changed()
	if err != nil {
		return fmt.Errorf("set user %s role in group %s: %w", user, group, err)
	}
	return nil
}

func (s *Store) setMembership(ctx context.Context, tx Querier, user, group, role string) error {
	var err error
	if role == "" {
		_, err = tx.Exec(ctx, `DELETE FROM memberships WHERE user_name = $1 AND group_name = $2`, user, group)
	} else {
		// A user deleted meanwhile fails the foreign key: not found.
		_, err = tx.Exec(ctx, `INSERT INTO memberships (user_name, group_name, role) VALUES ($1, $2, $3)
			ON CONFLICT (user_name, group_name) DO UPDATE SET role = excluded.role`, user, group, role)
	}
	return err
}

// DeleteUser removes a user; its memberships and tokens go with it (ON
// DELETE CASCADE).
func (s *Store) DeleteUser(ctx context.Context, name string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM users WHERE name = $1`, name)
		if err != nil {
			return err
		}
		return mustAffect(n)
	})
	s.auth.Changed()
	if err != nil {
		return fmt.Errorf("delete user %s: %w", name, err)
	}
	return nil
}

const tokenColumns = `id, kind, name, hash, user_name, node_id, group_names,
	max_uses, uses, expires_at, created_at, last_used, deployment_id`

// CreateToken stores a token. The user or node it names must exist.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		return s.insertToken(ctx, tx, t, s.d.Now())
	})
	if err != nil {
		return fmt.Errorf("create %s token %s: %w", t.Kind, t.ID, err)
	}
	return nil
}

// ReplaceNodeCredential swaps the node's credentials for t in one
// transaction. The node's row is locked first, so that two replacements
// take turns and the node ends with one credential, not one from each.
func (s *Store) ReplaceNodeCredential(ctx context.Context, t store.Token) error {
	if t.NodeID == "" {
		return fmt.Errorf("replace node credential %s: %w", t.ID, errdefs.Field("node_id", "required"))
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM nodes WHERE id = $1`+s.d.Lock("FOR NO KEY UPDATE"), t.NodeID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tokens WHERE node_id = $1`, t.NodeID); err != nil {
			return err
		}
		return s.insertToken(ctx, tx, t, s.d.Now())
	})
	s.auth.Changed()
	if err != nil {
		return fmt.Errorf("replace node %s credential with %s: %w", t.NodeID, t.ID, err)
	}
	return nil
}

func (s *Store) insertToken(ctx context.Context, tx Querier, t store.Token, now time.Time) error {
	if t.ID == "" {
		return errdefs.Field("id", "required")
	}
	if len(t.Hash) == 0 {
		return errdefs.Field("hash", "required")
	}
	// Check what the foreign keys would, to say which one is missing.
	if t.User != "" {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM users WHERE name = $1`, t.User).Scan(&one)
		if s.d.NoRows(err) {
			return errdefs.NotFound("user %s", t.User)
		}
		if err != nil {
			return err
		}
	}
	if t.NodeID != "" {
		if err := s.nodeExists(ctx, tx, t.NodeID); err != nil {
			return fmt.Errorf("node %s: %w", t.NodeID, err)
		}
	}
	groups, err := sqlrow.JSONArg(t.Groups)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO tokens (`+tokenColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		t.ID, t.Kind, t.Name, t.Hash, nullString(t.User), nullString(t.NodeID), groups,
		t.MaxUses, t.Uses, sqlrow.TimeArg(t.ExpiresAt), sqlrow.OrNow(t.CreatedAt, now).UnixNano(), sqlrow.TimeArg(t.LastUsed), t.DeploymentID)
	if s.d.IsUnique(err) {
		return errdefs.Conflict("token id or hash is taken")
	}
	return err
}

// TokenByHash finds a token by the SHA-256 of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (store.Token, error) {
	return s.auth.Token(hash, func() (store.Token, error) { return s.readTokenByHash(ctx, hash) })
}

func (s *Store) readTokenByHash(ctx context.Context, hash []byte) (store.Token, error) {
	t, err := s.scanToken(s.d.Reader().QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	if err != nil {
		// The hash stays out of the message: it is as good as the secret
		// wherever tokens are compared by hash.
		return store.Token{}, fmt.Errorf("token by hash: %w", err)
	}
	return t, nil
}

// ListTokens returns the tokens that match f, oldest first.
func (s *Store) ListTokens(ctx context.Context, f store.TokenFilter) ([]store.Token, error) {
	// A zero cursor key sorts before every token: created_at is never
	// negative and every id is above ''.
	var created int64 = -1 << 63
	var id string
	if f.After != "" {
		if err := store.DecodeCursor(f.After, &created, &id); err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
	}
	a := args{f.Kind, f.User, f.NodeID, created, id}
	rows, err := s.d.Reader().Query(ctx, `SELECT `+tokenColumns+` FROM tokens
		WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR user_name = $2) AND ($3 = '' OR node_id = $3)
			AND (created_at, id) > ($4, $5)
		ORDER BY created_at, id`+a.limit(f.Page), a...)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", s.d.Classify(err))
	}
	defer rows.Close()
	tokens := []store.Token{}
	for rows.Next() {
		t, err := s.scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		tokens = append(tokens, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", s.d.Classify(err))
	}
	return tokens, nil
}

// DeleteToken removes a token.
func (s *Store) DeleteToken(ctx context.Context, id string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM tokens WHERE id = $1`, id)
		if err != nil {
			return err
		}
		return mustAffect(n)
	})
	s.auth.Changed()
	if err != nil {
		return fmt.Errorf("delete token %s: %w", id, err)
	}
	return nil
}

// UseJoinToken counts one use of a join token if it has uses left and has
// not expired at now, and returns the token as counted. One statement
// checks and counts: a concurrent use waits for the row and checks again.
func (s *Store) UseJoinToken(ctx context.Context, id string, now time.Time) (store.Token, error) {
	var t store.Token
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		t, err = s.useJoinToken(ctx, tx, id, now)
		return err
	})
	if err != nil {
		return store.Token{}, fmt.Errorf("use join token %s: %w", id, err)
	}
	return t, nil
}

// useJoinToken counts one use of join token id in tx, or says why not.
func (s *Store) useJoinToken(ctx context.Context, tx Querier, id string, now time.Time) (store.Token, error) {
	t, err := s.scanToken(tx.QueryRow(ctx, `UPDATE tokens SET uses = uses + 1, last_used = $1
		WHERE id = $2 AND kind = $3
			AND (max_uses = 0 OR uses < max_uses)
			AND (expires_at IS NULL OR expires_at > $1)
		RETURNING `+tokenColumns, now.UnixNano(), id, api.TokenJoin))
	if !errors.Is(err, errdefs.ErrNotFound) {
		return t, err
	}
	// Say why it was refused.
	t, err = s.scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE id = $1`, id))
	switch {
	case err != nil:
		return store.Token{}, err
	case t.Kind != api.TokenJoin:
		return store.Token{}, fmt.Errorf("%s token is not a join token: %w", t.Kind, errdefs.ErrPermission)
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return store.Token{}, fmt.Errorf("expired at %s: %w", t.ExpiresAt.Format(time.RFC3339), errdefs.ErrPermission)
	default:
		return store.Token{}, fmt.Errorf("all %d uses spent: %w", t.MaxUses, errdefs.ErrPermission)
	}
}

func (s *Store) scanToken(row Row) (store.Token, error) {
	var (
		t                 store.Token
		user, nodeID      *string
		groups            string
		expires, lastUsed *int64
		created           int64
	)
	err := row.Scan(&t.ID, &t.Kind, &t.Name, &t.Hash, &user, &nodeID, &groups,
		&t.MaxUses, &t.Uses, &expires, &created, &lastUsed, &t.DeploymentID)
	if s.d.NoRows(err) {
		return store.Token{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Token{}, s.d.Classify(err)
	}
	if t.Groups, err = sqlrow.Strings(groups); err != nil {
		return store.Token{}, fmt.Errorf("token %s groups: %w", t.ID, err)
	}
	if user != nil {
		t.User = *user
	}
	if nodeID != nil {
		t.NodeID = *nodeID
	}
	t.ExpiresAt = sqlrow.TimeOf(expires)
	t.CreatedAt = sqlrow.FromNanos(created)
	t.LastUsed = sqlrow.TimeOf(lastUsed)
	return t, nil
}
