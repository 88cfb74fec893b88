package provisiontest

import (
	"errors"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// RegisterStandIns registers a record under each name, in that order, for
// tests of code that names providers but makes none (templates,
// mappings): the record lists no keys (ExtraKeys nil, so its blocks are
// open) and its New fails. Call it from a test file's init, in a binary
// that links no real driver of the same name.
func RegisterStandIns(names ...string) {
	for i, name := range names {
		provision.Register(provision.Driver{Name: name, Order: i + 1, New: standIn})
	}
}

func standIn(map[string]string) (provision.Provider, error) {
	return nil, errors.New("a stand-in makes no provider")
}
