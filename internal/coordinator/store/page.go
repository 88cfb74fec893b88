package store

import (
	"encoding/json"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/paging"
)

// Page asks a list for one page of its rows, in the list's order. Paging is
// by keyset, never by offset: a page starts after the sort key of the last
// row of the one before, so rows added or deleted meanwhile neither shift
// the next page nor make it repeat or skip a row that was already there.
type Page = paging.Window

// The cursors of the lists: the values of each list's sort key, which is
// unique and ordered the way the list is, as a JSON array. A cursor says
// nothing of which list it came from; the server wraps it with that.

// Cursor is n's place in ListNodes: name, then ID.
func (n Node) Cursor() string { return cursor(n.Name, n.ID) }

// Cursor is su's place in ListSuites: priority (highest first), CreatedAt, ID.
func (su Suite) Cursor() string { return cursor(su.Spec.Priority, su.CreatedAt.UnixNano(), su.ID) }

// Cursor is t's place in ListTasks: the order tasks were added in.
func (t Task) Cursor() string { return cursor(t.Seq) }

// Cursor is d's place in ListDocuments: its name.
func (d Document) Cursor() string { return cursor(d.Name) }

// Cursor is d's place in ListDeployments: CreatedAt, then ID.
func (d Deployment) Cursor() string { return cursor(d.CreatedAt.UnixNano(), d.ID) }

// Cursor is m's place in ListPoolMachines: CreatedAt, then ID.
func (m PoolMachine) Cursor() string { return cursor(m.CreatedAt.UnixNano(), m.ID) }

// PoolEventCursor is e's place in PoolEvents: its ID.
func PoolEventCursor(e api.PoolEvent) string { return cursor(e.ID) }

// Cursor is u's place in ListUsers: the name.
func (u User) Cursor() string { return cursor(u.Name) }

// Cursor is t's place in ListTokens: CreatedAt, then ID.
func (t Token) Cursor() string { return cursor(t.CreatedAt.UnixNano(), t.ID) }

// ContainerCursor is c's place in ListContainers: node, CreatedAt, job ID.
func ContainerCursor(c api.Container) string {
	return cursor(c.Node, c.CreatedAt.UnixNano(), c.Job.ID)
}

func cursor(key ...any) string {
	b, err := json.Marshal(key)
	if err != nil {
		panic(fmt.Sprintf("encode cursor %v: %v", key, err)) // strings and integers always encode
	}
	return string(b)
}

// DecodeCursor reads a cursor made by a Cursor method into key, pointers to
// the sort key's values in order. A cursor of another shape is
// errdefs.ErrInvalid naming the field "after".
func DecodeCursor(c string, key ...any) error {
	var vals []json.RawMessage
	if err := json.Unmarshal([]byte(c), &vals); err != nil || len(vals) != len(key) {
		return errdefs.Field("after", "is not a cursor of this list; pass the next value of the previous page")
	}
	for i, v := range vals {
		if err := json.Unmarshal(v, key[i]); err != nil {
			return errdefs.Field("after", "is not a cursor of this list; pass the next value of the previous page")
		}
	}
	return nil
}
