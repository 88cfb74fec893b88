package sqlstore

import (
	"strconv"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// args numbers a statement's arguments as they are added: $1, $2, ...
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
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
