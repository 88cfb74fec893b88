package sqlstore

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const documentColumns = `kind, name, body, version, created_at, updated_at`

// PutDocument creates or replaces a document, bumping its version, in one
// statement: concurrent puts of one document each get a version of their own.
func (s *Store) PutDocument(ctx context.Context, d store.Document) (store.Document, error) {
	if d.Kind == "" || d.Name == "" {
		return d, fmt.Errorf("put document: %w", errdefs.Field("name", "kind and name are required"))
	}
	body := d.Body
	if body == nil {
		body = []byte{}
	}
	now := s.d.Now().UnixNano()
	var out store.Document
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		out, err = s.scanDocument(tx.QueryRow(ctx, `INSERT INTO documents AS d (`+documentColumns+`)
			VALUES ($1, $2, $3, 1, $4, $4)
			ON CONFLICT (kind, name) DO UPDATE SET body = excluded.body, version = d.version + 1, updated_at = excluded.updated_at
			RETURNING `+documentColumns, d.Kind, d.Name, body, now))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("put %s %s: %w", d.Kind, d.Name, err)
	}
	return out, nil
}

// GetDocument reads one document.
func (s *Store) GetDocument(ctx context.Context, kind, name string) (store.Document, error) {
	d, err := s.scanDocument(s.d.Reader().QueryRow(ctx, `SELECT `+documentColumns+` FROM documents WHERE kind = $1 AND name = $2`, kind, name))
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
	a := args{kind, after}
	rows, err := s.d.Reader().Query(ctx, `SELECT `+documentColumns+` FROM documents WHERE kind = $1 AND name > $2 ORDER BY name`+a.limit(p), a...)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", kind, s.d.Classify(err))
	}
	defer rows.Close()
	out := []store.Document{}
	for rows.Next() {
		d, err := s.scanDocument(rows)
		if err != nil {
			return nil, fmt.Errorf("list %ss: %w", kind, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %ss: %w", kind, s.d.Classify(err))
	}
	return out, nil
}

// DeleteDocument removes a document.
func (s *Store) DeleteDocument(ctx context.Context, kind, name string) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM documents WHERE kind = $1 AND name = $2`, kind, name)
		if err != nil {
			return err
		}
		return mustAffect(n)
	})
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	return nil
}

func (s *Store) scanDocument(row Row) (store.Document, error) {
	var d store.Document
	var created, updated int64
	err := row.Scan(&d.Kind, &d.Name, &d.Body, &d.Version, &created, &updated)
	if s.d.NoRows(err) {
		return d, errdefs.ErrNotFound
	}
	if err != nil {
		return d, s.d.Classify(err)
	}
	if d.Body == nil {
		d.Body = []byte{}
	}
	d.CreatedAt, d.UpdatedAt = sqlrow.FromNanos(created), sqlrow.FromNanos(updated)
	return d, nil
}
