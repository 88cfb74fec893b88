package sqlstore

import (
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// args numbers a statement's arguments as they are added: $1, $2, ...
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// list adds each value and is the parenthesized list of their
// placeholders, for IN: "($3, $4)".
func list[T any](a *args, vs []T) string {
	ps := make([]string, len(vs))
	for i, v := range vs {
		ps[i] = a.add(v)
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// limit is the LIMIT of a page (none when it has no limit).
func (a *args) limit(p store.Page) string {
	if p.Limit <= 0 {
		return ""
	}
	return ` LIMIT ` + a.add(p.Limit)
}

// mustAffect is errdefs.ErrNotFound if a statement changed no row.
func mustAffect(n int64) error {
	if n == 0 {
		return errdefs.ErrNotFound
	}
	return nil
}
