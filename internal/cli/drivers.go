//go:build !agentonly && !clientonly

package cli

// Every provider and executor registers itself here, once for the whole
// program: the server makes them by name, and the CLI checks templates and
// mappings against their records.
import (
	"github.com/nodemgr/nodemgr/internal/base/validate"
	_ "github.com/nodemgr/nodemgr/internal/drivers/all"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// providerList and executorList name the registered drivers for help
// texts and errors, "a, b or c", so that they list what this binary has.
func providerList() string { return validate.OrList(provision.Names()) }

func executorList() string { return validate.OrList(execute.Names()) }
