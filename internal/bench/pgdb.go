package bench

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// freshDatabase creates an empty database for one run on the PostgreSQL
// server that adminURL reaches (its user needs CREATEDB), and returns its
// URL and a function that drops it. Each run starts from nothing, so that
// nodes of an earlier run do not count in this one.
func freshDatabase(ctx context.Context, adminURL, purpose string) (string, func(), error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("--db: %w", err)
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("--db: connect: %w", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("nodemgr_bench_%s_%d", purpose, time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("--db: create a database for the run (the user needs CREATEDB): %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, adminURL); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	return u.String(), drop, nil
}
