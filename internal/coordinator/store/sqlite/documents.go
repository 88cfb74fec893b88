package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

const documentColumns = `kind, name, body, version, created_at, updated_at`

// PutDocument creates or replaces a document, bumping its version.
func (s *Store) PutDocument(ctx context.Context, d store.Document) (store.Document, error) {
	if d.Kind == "" || d.Name == "" {
		return d, fmt.Errorf("put document: %w", errdefs.Field("name", "kind and name are required"))
	}
	now := s.now().UnixNano()
	var out store.Document
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanDocument(tx.QueryRowContext(ctx, `INSERT INTO documents (`+documentColumns+`)
			VALUES (?1, ?2, ?3, 1, ?4, ?4)
			ON CONFLICT (kind, name) DO UPDATE SET body = excluded.body, version = version + 1, updated_at = excluded.updated_at
			RETURNING `+documentColumns, d.Kind, d.Name, d.Body, now))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("put %s %s: %w", d.Kind, d.Name, err)
	}
	return out, nil
}

// GetDocument reads one document.
func (s *Store) GetDocument(ctx context.Context, kind, name string) (store.Document, error) {
	d, err := scanDocument(s.r.QueryRowContext(ctx, `SELECT `+documentColumns+` FROM documents WHERE kind = ? AND name = ?`, kind, name))
	if err != nil {
		return d, fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	return d, nil
}

// ListDocuments lists a kind's documents by name.
func (s *Store) ListDocuments(ctx context.Context, kind string, p store.Page) ([]store.Document, error) {
	var after string
	if p.After != "" {
		if err := store.DecodeCursor(p.After, &after); err != nil {
			return nil, fmt.Errorf("list %ss: %w", kind, err)
		}
	}
	lim, args := limitClause(p, []any{kind, after})
	rows, err := s.r.QueryContext(ctx, `SELECT `+documentColumns+` FROM documents WHERE kind = ? AND name > ? ORDER BY name`+lim, args...)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", kind, classify(err))
	}
	defer rows.Close()
	out := []store.Document{}
	for rows.Next() {
		d, err := scanDocument(rows)
		if err != nil {
			return nil, fmt.Errorf("list %ss: %w", kind, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeleteDocument removes a document.
func (s *Store) DeleteDocument(ctx context.Context, kind, name string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM documents WHERE kind = ? AND name = ?`, kind, name)
		if err != nil {
			return classify(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errdefs.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	return nil
}

func scanDocument(row scanner) (store.Document, error) {
	var d store.Document
	var created, updated int64
	err := row.Scan(&d.Kind, &d.Name, &d.Body, &d.Version, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return d, errdefs.ErrNotFound
	}
	if err != nil {
		return d, classify(err)
	}
	d.CreatedAt, d.UpdatedAt = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
	return d, nil
}
