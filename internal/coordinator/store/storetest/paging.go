package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// pagedList is one of the store's lists as the paging tests see it: rows
// named by an ID, read a page at a time with their cursors.
type pagedList struct {
	name string
	// setup runs once before any add (a suite for tasks, a user for tokens).
	setup func(t *testing.T, s store.Store)
	// add stores row i under id(i). Rows sort in an order that is not i's:
	// rank(i) scatters them, with ties on the leading sort key, so that
	// rows added during a walk land before and after the cursor.
	add func(t *testing.T, s store.Store, i int)
	// del removes row i; nil where the store cannot delete one row.
	del func(t *testing.T, s store.Store, i int)
	// list reads a page: the rows' IDs and cursors.
	list func(ctx context.Context, s store.Store, p store.Page) (ids, cursors []string, err error)
	// prefix names the rows: id(i) is prefix + i, zero-padded.
	prefix string
}

func (l pagedList) id(i int) string { return fmt.Sprintf("%s%03d", l.prefix, i) }

// rank scatters i over 0..100 (37 is prime to 101), so the order rows are
// added in is not the order they list in.
func rank(i int) int { return i * 37 % 101 }

// tie is a leading sort key that about one row in seven shares, so that
// pages end inside runs of ties and the rest of the key must break them.
func tie(i int) int { return rank(i) % 7 }

// at is a creation time that ties as tie does.
func at(i int) time.Time { return t0.Add(time.Duration(tie(i)) * time.Second) }

func pagedLists() []pagedList {
	return []pagedList{
		{name: "nodes", prefix: "n",
			add: func(t *testing.T, s store.Store, i int) {
				n := newNode(fmt.Sprintf("n%03d", i))
				n.Name = fmt.Sprintf("node-%d", tie(i))
				mustCreateNode(t, s, n)
			},
			del: func(t *testing.T, s store.Store, i int) { must(t, s.DeleteNode(t.Context(), fmt.Sprintf("n%03d", i))) },
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				return cursors(s.ListNodes(ctx, store.NodeFilter{Page: p}))(func(n store.Node) string { return n.ID })
			}},
		{name: "suites", prefix: "s",
			add: func(t *testing.T, s store.Store, i int) {
				su := newSuite(fmt.Sprintf("s%03d", i))
				su.Spec.Priority = rank(i) % 3
				su.CreatedAt = at(i)
				mustCreateSuite(t, s, su)
			},
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				return cursors(s.ListSuites(ctx, store.SuiteFilter{States: []string{api.SuiteOpen}, Page: p}))(func(su store.Suite) string { return su.ID })
			}},
		{name: "tasks", prefix: "k",
			setup: func(t *testing.T, s store.Store) { mustCreateSuite(t, s, newSuite("s")) },
			add: func(t *testing.T, s store.Store, i int) {
				mustAddTasks(t, s, "s", store.Task{ID: fmt.Sprintf("k%03d", i), Spec: api.TaskSpec{Argv: []string{"true"}}})
			},
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				return cursors(s.ListTasks(ctx, store.TaskFilter{SuiteID: "s", States: []string{api.TaskReady}, Page: p}))(func(t store.Task) string { return t.ID })
			}},
		{name: "documents", prefix: "d",
			add: func(t *testing.T, s store.Store, i int) {
				// Names sort by rank, not by the order they were added in.
				_, err := s.PutDocument(t.Context(), store.Document{Kind: store.KindTemplate, Name: docName(i), Body: []byte("name: x\n")})
				must(t, err)
			},
			del: func(t *testing.T, s store.Store, i int) {
				must(t, s.DeleteDocument(t.Context(), store.KindTemplate, docName(i)))
			},
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				return cursors(s.ListDocuments(ctx, store.KindTemplate, p))(func(d store.Document) string { return d.Name[3:] })
			}},
		{name: "deployments", prefix: "p",
			add: func(t *testing.T, s store.Store, i int) {
				id := fmt.Sprintf("p%03d", i)
				must(t, s.CreateDeployment(t.Context(), store.Deployment{ID: id, Provider: "local", Name: id, State: "running", CreatedAt: at(i)}))
			},
			del: func(t *testing.T, s store.Store, i int) {
				must(t, s.DeleteDeployment(t.Context(), fmt.Sprintf("p%03d", i)))
			},
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				return cursors(s.ListDeployments(ctx, store.DeploymentFilter{Provider: "local", Page: p}))(func(d store.Deployment) string { return d.ID })
			}},
		{name: "users", prefix: "u",
			add: func(t *testing.T, s store.Store, i int) {
				mustCreateUser(t, s, store.User{Name: userName(i), Groups: map[string]string{"g": api.RoleRead}})
			},
			del: func(t *testing.T, s store.Store, i int) { must(t, s.DeleteUser(t.Context(), userName(i))) },
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				users, err := s.ListUsers(ctx, p)
				for _, u := range users {
					if u.Groups["g"] != api.RoleRead {
						return nil, nil, fmt.Errorf("user %s listed without its membership: %v", u.Name, u.Groups)
					}
				}
				return cursors(users, err)(func(u store.User) string { return u.Name[3:] })
			}},
		{name: "tokens", prefix: "t",
			setup: func(t *testing.T, s store.Store) { mustCreateUser(t, s, store.User{Name: "alice"}) },
			add: func(t *testing.T, s store.Store, i int) {
				tok := apiToken(fmt.Sprintf("t%03d", i), "alice")
				tok.CreatedAt = at(i)
				mustCreateToken(t, s, tok)
			},
			del: func(t *testing.T, s store.Store, i int) { must(t, s.DeleteToken(t.Context(), fmt.Sprintf("t%03d", i))) },
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				return cursors(s.ListTokens(ctx, store.TokenFilter{Kind: api.TokenAPI, User: "alice", Page: p}))(func(t store.Token) string { return t.ID })
			}},
		{name: "containers", prefix: "c",
			add: func(t *testing.T, s store.Store, i int) {
				c := api.Container{Job: api.ContainerJob{ID: fmt.Sprintf("c%03d", i), Name: "web", Image: "busybox"},
					Status: api.ContainerRunning, CreatedAt: at(i)}
				must(t, s.PutContainers(t.Context(), fmt.Sprintf("n-%d", rank(i)%2), []api.Container{c}))
			},
			del: func(t *testing.T, s store.Store, i int) {
				must(t, s.DeleteContainer(t.Context(), fmt.Sprintf("n-%d", rank(i)%2), fmt.Sprintf("c%03d", i)))
			},
			list: func(ctx context.Context, s store.Store, p store.Page) ([]string, []string, error) {
				cs, err := s.ListContainers(ctx, store.ContainerFilter{Live: true, Page: p})
				ids, curs := []string{}, []string{}
				for _, c := range cs {
					ids, curs = append(ids, c.Job.ID), append(curs, store.ContainerCursor(c))
				}
				return ids, curs, err
			}},
	}
}

// docName and userName make names that sort by rank; from their fourth
// character on they are the row's ID.
func docName(i int) string  { return fmt.Sprintf("%03dd%03d", rank(i), i) }
func userName(i int) string { return fmt.Sprintf("%03du%03d", rank(i), i) }

type cursorer interface{ Cursor() string }

// cursors turns a list's answer into IDs and cursors.
func cursors[T cursorer](rows []T, err error) func(id func(T) string) ([]string, []string, error) {
	return func(id func(T) string) ([]string, []string, error) {
		ids, curs := []string{}, []string{}
		for _, r := range rows {
			ids, curs = append(ids, id(r)), append(curs, r.Cursor())
		}
		return ids, curs, err
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// walkPages walks a list a page at a time while rows are added and deleted
// between the pages: keyset paging must return every row that was there
// all along exactly once, in list order, and never a deleted one.
func walkPages(t *testing.T, s store.Store, l pagedList) {
	const initial, limit = 30, 4
	ctx := t.Context()
	if l.setup != nil {
		l.setup(t, s)
	}
	for i := range initial {
		l.add(t, s, i)
	}
	var walked []string
	seen, deleted := map[string]bool{}, map[string]bool{}
	next, after := initial, ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("%s: still paging after 100 pages: the cursor does not move", l.name)
		}
		ids, curs, err := l.list(ctx, s, store.Page{After: after, Limit: limit})
		if err != nil {
			t.Fatalf("list %s after %q: %v", l.name, after, err)
		}
		if len(ids) > limit {
			t.Fatalf("list %s with limit %d = %d rows", l.name, limit, len(ids))
		}
		for _, id := range ids {
			if seen[id] {
				t.Errorf("list %s: row %s came twice", l.name, id)
			}
			if deleted[id] {
				t.Errorf("list %s: row %s came after it was deleted", l.name, id)
			}
			seen[id] = true
		}
		walked = append(walked, ids...)
		if len(ids) < limit {
			break
		}
		after = curs[len(curs)-1]
		// Between pages, other clients add rows (some sort before the
		// cursor, some after) and delete the cursor's own row and one not
		// yet listed.
		l.add(t, s, next)
		l.add(t, s, next+1)
		next += 2
		if l.del != nil {
			var last int
			fmt.Sscanf(ids[len(ids)-1][len(l.prefix):], "%d", &last)
			l.del(t, s, last)
			deleted[ids[len(ids)-1]] = true
			// The row at the very end is one the walk has not reached.
			all, _, err := l.list(ctx, s, store.Page{})
			if err != nil {
				t.Fatal(err)
			}
			if end := all[len(all)-1]; !seen[end] {
				var i int
				fmt.Sscanf(end[len(l.prefix):], "%d", &i)
				l.del(t, s, i)
				deleted[end] = true
			}
		}
	}
	for i := range initial {
		if id := l.id(i); !seen[id] && !deleted[id] {
			t.Errorf("list %s: row %s, there all along, never came", l.name, id)
		}
	}
	// The rows still there came in list order.
	all, _, err := l.list(ctx, s, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var inOrder []string
	for _, id := range all {
		if seen[id] {
			inOrder = append(inOrder, id)
		}
	}
	var walkedLeft []string
	for _, id := range walked {
		if slices.Contains(all, id) {
			walkedLeft = append(walkedLeft, id)
		}
	}
	if !slices.Equal(inOrder, walkedLeft) {
		t.Errorf("list %s paged by %d came in order %v, want list order %v", l.name, limit, walkedLeft, inOrder)
	}

	// A limit alone is the first rows; a cursor that is not one is invalid.
	first, _, err := l.list(ctx, s, store.Page{Limit: 3})
	if err != nil || !slices.Equal(first, all[:3]) {
		t.Errorf("list %s with limit 3 = %v, %v; want %v", l.name, first, err, all[:3])
	}
	for _, bad := range []string{"garbage", `[]`, `[1,2,3,4,5]`, `{"a":1}`, `["x",{}]`} {
		if _, _, err := l.list(ctx, s, store.Page{After: bad}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("list %s after %q = %v, want %v", l.name, bad, err, errdefs.ErrInvalid)
		}
	}
}
