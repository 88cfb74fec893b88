//go:build clientonly

package cli

// The client build knows the drivers by their records alone: enough to
// check templates and mappings and to name the drivers in help texts,
// without linking the code that makes machines and runs commands.
import (
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	execrecords "github.com/nodemgr/nodemgr/internal/drivers/execute/records"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/records"
)

func init() {
	records.Describe()
	execrecords.Describe()
}

// providerList and executorList name the drivers for help texts and
// errors, "a, b or c".
func providerList() string { return validate.OrList(provision.Names()) }

func executorList() string { return validate.OrList(execute.Names()) }
