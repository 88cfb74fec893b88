package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

var _ store.Signals = (*Store)(nil)

// Signal sends payload on channel with pg_notify, outside any transaction.
func (s *Store) Signal(ctx context.Context, channel, payload string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return fmt.Errorf("signal %s: %w", channel, classify(err))
	}
	return nil
}

// Listen runs LISTEN on a connection of its own (LISTEN holds a session,
// which a pooled or PgBouncer-shared connection cannot) until ctx ends or
// the connection fails.
func (s *Store) Listen(ctx context.Context, channels []string, fn func(channel, payload string)) error {
	err := s.listenOnce(ctx, channels, fn)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("listen for signals: %w", classify(err))
}

func (s *Store) listenOnce(ctx context.Context, channels []string, fn func(channel, payload string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.listen.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	for _, ch := range channels {
		fn(ch, "") // what was sent before now is missed: reread
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Channel, n.Payload)
	}
}
