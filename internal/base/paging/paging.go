// Package paging pages the API's lists: ?limit= and ?after= in, the rows
// of one page and the opaque cursor of the next out. A cursor is the
// store's sort key of the last row, bound to the list and filters it was
// made for.
package paging

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Every list pages with ?limit= and ?after=, and its body says where the
// next page starts in "next" (absent on the last page).
//
// A request without a limit gets DefaultLimit rows, as GitHub (30, at
// most 100) and Stripe (10, at most 100) do, and not everything, as
// Kubernetes does for the sake of clients older than its paging: an answer
// stays bounded at the edge whatever a client forgets, and "next" tells it
// there is more. nodemgr's rows are small, so its pages are larger.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Window asks a list for one page of its rows, in the list's order: the
// rows after the cursor After, at most Limit of them (0: no limit). Paging
// is by keyset, never by offset (see store.Page).
type Window struct {
	// After is the cursor of the last row of the previous page; "" starts
	// at the top. The row itself need not exist any more.
	After string
	// Limit is the most rows to return; 0 means no limit.
	Limit int
}

// Request is a list request's paging: its window, and the scope (the list
// and its filters) that its cursors belong to.
type Request struct {
	Window
	scope string
}

// apiCursor is the API's opaque cursor: the store's cursor of the last row
// of a page, with the scope it was made in, so that a cursor cannot start
// another list, or the same list under other filters, at a wrong place.
type apiCursor struct {
	Scope string `json:"s"`
	Key   string `json:"k"`
}

// Read reads ?limit= and ?after= for the list whose name and filter
// values are scope.
func Read(q url.Values, scope ...string) (Request, error) {
	sum := sha256.Sum256([]byte(strings.Join(scope, "\x00")))
	p := Request{Window: Window{Limit: DefaultLimit}, scope: base64.RawURLEncoding.EncodeToString(sum[:9])}
	if l, ok := q["limit"]; ok {
		n, err := strconv.Atoi(l[0])
		if err != nil || n < 1 || n > MaxLimit {
			return p, errdefs.Field("limit", "must be a whole number from 1 to %d, got %q; page through longer lists with after", MaxLimit, l[0])
		}
		p.Limit = n
	}
	if a := q.Get("after"); a != "" {
		key, err := p.decode(a)
		if err != nil {
			return p, err
		}
		p.After = key
	}
	return p, nil
}

func (p Request) decode(after string) (string, error) {
	var c apiCursor
	b, err := base64.RawURLEncoding.DecodeString(after)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Key == "" {
		return "", errdefs.Field("after", "is not a cursor this server made; pass the next value of the previous page, or leave after out to start at the top")
	}
	if c.Scope != p.scope {
		return "", errdefs.Field("after", "is the cursor of another list or of the same list with other filters; pass the next value of the previous page of this same request, or leave after out to start at the top")
	}
	return c.Key, nil
}

// next is the API cursor of a page whose last row has the store cursor key.
func (p Request) next(key string) string {
	b, err := json.Marshal(apiCursor{Scope: p.scope, Key: key})
	if err != nil {
		panic(err) // two strings always encode
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Fill reads one page of rows through read, keeping those keep accepts
// (nil keeps all), and returns them with the cursor of the next page, ""
// on the last. Rows the caller may not see are skipped without counting,
// so a page is short only at the end of the list, and one row more than
// the limit is read to know whether there is a next page at all.
func Fill[T any](p Request, read func(Window) ([]T, error), cursor func(T) string, keep func(T) bool) ([]T, string, error) {
	out := make([]T, 0, min(p.Limit, 128))
	after := p.After
	for {
		rows, err := read(Window{After: after, Limit: p.Limit + 1})
		if err != nil {
			return nil, "", err
		}
		for _, r := range rows {
			after = cursor(r)
			if keep != nil && !keep(r) {
				continue
			}
			if len(out) == p.Limit {
				return out, p.next(cursor(out[len(out)-1])), nil
			}
			out = append(out, r)
		}
		if len(rows) <= p.Limit {
			return out, "", nil
		}
	}
}
