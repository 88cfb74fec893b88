package worker

import (
	"os/exec"
	"strings"
	"testing"
)

// Worker programs link this package: it must stay small, and must not pull
// in the agent's side of the pool (or anything else of the agent's).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/nodemgr/nodemgr/worker").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/nodemgr/nodemgr/worker":                    true,
		"github.com/nodemgr/nodemgr/api":                       true,
		"github.com/nodemgr/nodemgr/internal/node/workerproto": true,
		"github.com/nodemgr/nodemgr/internal/node/gocrash":     true,
		"github.com/nodemgr/nodemgr/internal/node/proctree":    true,
		"github.com/nodemgr/nodemgr/internal/base/cgroup":      true, // proctree's, standard library only
		"github.com/nodemgr/nodemgr/internal/base/tasklog":     true, // standard library only
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/nodemgr/nodemgr/") && !allowed[pkg] {
			t.Errorf("worker depends on %s", pkg)
		}
	}
}
