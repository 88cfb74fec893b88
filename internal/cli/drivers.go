package cli

// Every provider and executor registers itself here, once for the whole
// program: the server makes them by name, and the CLI checks templates and
// mappings against their records.
import (
	"strings"

	_ "github.com/nodemgr/nodemgr/internal/drivers/all"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// providerList and executorList name the registered drivers for help
// texts and errors, "a, b or c", so that they list what this binary has.
func providerList() string { return orList(provision.Names()) }

func executorList() string { return orList(execute.Names()) }

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
