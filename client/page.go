package client

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
)

// Page asks a list for one page. Lists page by keyset: a page starts after
// the last item of the one before, so items added or removed meanwhile
// neither repeat nor skip the others.
type Page struct {
	// Limit is the most items in the page, 1 to 1000; 0 means the
	// server's default (100).
	Limit int
	// After is the Next of the previous page; "" starts at the top.
	After string
}

// MaxPageLimit is the largest Limit the server takes.
const MaxPageLimit = 1000

// values adds the page to a list's query.
func (p Page) values(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	return q
}

// filter is a list's query that keeps only the items whose key is value,
// or no query when value is "" (all items).
func filter(key, value string) url.Values {
	q := url.Values{}
	if value != "" {
		q.Set(key, value)
	}
	return q
}

// withQuery is path with q, if it has any values.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// allPages is All over a page method that answers the API's list, which
// says what its page holds.
func allPages[T any, L interface{ Page() ([]T, string) }](ctx context.Context, page func(context.Context, Page) (L, error)) ([]T, error) {
	return All(ctx, func(ctx context.Context, p Page) ([]T, string, error) {
		l, err := page(ctx, p)
		items, next := l.Page()
		return items, next, err
	})
}

// All reads every page of a list from the top, MaxPageLimit items at a
// time: page reads the page that p asks for and returns its items and its
// Next. Every list method without "Page" in its name is All over its
// page method; use All for pages of your own.
func All[T any](ctx context.Context, page func(ctx context.Context, p Page) ([]T, string, error)) ([]T, error) {
	var out []T
	p := Page{Limit: MaxPageLimit}
	for {
		items, next, err := page(ctx, p)
		if err != nil {
			return out, err
		}
		out = append(out, items...)
		if next == "" {
			if out == nil {
				out = []T{}
			}
			return out, nil
		}
		if next == p.After {
			return out, fmt.Errorf("list: the server gave the same next page %q twice; report this as a bug", next)
		}
		p.After = next
	}
}
