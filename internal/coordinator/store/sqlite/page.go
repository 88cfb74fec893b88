package sqlite

import "github.com/nodemgr/nodemgr/internal/coordinator/store"

// limitClause is the LIMIT of a page (none when it has no limit), with its
// argument appended to args.
func limitClause(p store.Page, args []any) (string, []any) {
	if p.Limit <= 0 {
		return "", args
	}
	return ` LIMIT ?`, append(args, p.Limit)
}
