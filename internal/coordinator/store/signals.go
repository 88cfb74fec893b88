package store

import "context"

// Signals carries wake-ups between servers that share one store: a server
// that enqueues a notification for an agent connected to another server,
// or adds tasks that agents elsewhere may take, tells them so. PostgreSQL
// does it with LISTEN/NOTIFY; a store that only one server uses (SQLite)
// does not implement it.
//
// Signals are hints, never the truth: a listener that missed some (its
// connection dropped) is told by a call with an empty payload, and then
// rereads what it serves.
type Signals interface {
	// Signal sends payload (at most 7,000 bytes) on channel to every
	// server listening on it, the sender included. It is not part of any
	// transaction: send it after the change it announces is committed.
	Signal(ctx context.Context, channel, payload string) error
	// Listen calls fn for each signal on channels, one at a time, until
	// ctx ends (nil) or the listening fails (the error; call it again).
	// Once it listens it first calls fn(channel, "") for every channel,
	// since signals sent before were not heard.
	Listen(ctx context.Context, channels []string, fn func(channel, payload string)) error
}
