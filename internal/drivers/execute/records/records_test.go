package records

import (
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

// TestDescribedExecutors: a build with the records alone names every
// executor, in order, each by its capability.
func TestDescribedExecutors(t *testing.T) {
	Describe()
	if got, want := execute.Names(), []string{"local", "docker", "ssh", "sftp", "rsync"}; !slices.Equal(got, want) {
		t.Fatalf("described executors = %v, want %v", got, want)
	}
	if d, ok := execute.ByCapability(CapSSH); !ok || d.Name != "ssh" || d.New != nil {
		t.Fatalf("ByCapability(%s) = %+v, %v; want ssh's record, without code", CapSSH, d, ok)
	}
}
