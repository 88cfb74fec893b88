package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/nodemgr/nodemgr/"

// deps lists the module packages pkg depends on, directly or not.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	var list []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		list = append(list, p.ImportPath)
	}
	return list
}

func TestLayers(t *testing.T) {
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"internal/agent", []string{"internal/server", "internal/store"}},
		{"internal/proto", []string{"internal/server", "internal/agent", "internal/store"}},
		{"internal/store/sqlite", []string{"internal/server", "internal/agent", "net/http"}},
		{"internal/store/postgres", []string{"internal/server", "internal/agent", "net/http"}},
		// What both SQL stores share knows no driver: each keeps its own.
		{"internal/store/sqlrow", []string{"database/sql", "github.com/jackc/pgx/v5", "modernc.org/sqlite", "internal/server"}},
		{"client", []string{"internal/server", "internal/agent", "internal/store"}},
		{"worker", []string{"internal/server", "internal/agent", "internal/store", "internal/workerpool"}},
		{"internal/workerpool", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/provision/docker", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/provision/libvirt", []string{"internal/server", "internal/store", "internal/agent", "internal/orchestrate"}},
		{"internal/provision/aws", []string{"internal/server", "internal/store", "internal/agent", "internal/orchestrate"}},
		{"internal/execute/dockerexec", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/execute/local", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/template", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/artifact", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/portalloc", []string{"internal/server", "internal/store", "internal/agent"}},
		{"internal/service", []string{"internal/server", "internal/store", "internal/agent", "internal/portalloc"}},
		{"internal/container", []string{"internal/server", "internal/store", "internal/agent", "internal/portalloc"}},
		{"internal/capacity", []string{"internal/server", "internal/store", "internal/agent"}},
		// The orchestrator sees the server only through its Cluster
		// interface, and runs no agent code.
		{"internal/orchestrate", []string{"internal/server", "internal/agent", "net/http", "internal/cli"}},
		{"internal/httpapi", []string{"internal/server", "internal/store", "internal/agent"}},
		// Shared by the server, the agent and the client: none of them.
		{"internal/tlsca", []string{"internal/server", "internal/store", "internal/agent", "client"}},
		{"internal/cleartext", []string{"internal/server", "internal/store", "internal/agent", "client"}},
		{"internal/procenv", []string{"internal/server", "internal/store", "internal/agent"}},
		// The machine's notices are read by the agent, never decided on here.
		{"internal/imds", []string{"internal/server", "internal/store", "internal/agent"}},
		// Who code runs as is the node's question: the agent, its worker
		// pools and its services ask it.
		{"internal/runas", []string{"internal/server", "internal/store", "internal/agent", "internal/workerpool", "internal/service"}},
		// Linked into worker programs (package worker): nothing of the agent's.
		{"internal/gocrash", []string{"internal/server", "internal/store", "internal/agent", "internal/workerpool"}},
		{"internal/proctree", []string{"internal/server", "internal/store", "internal/agent", "internal/workerpool"}},
		// The blob store keeps bytes; who may read them is the server's call.
		{"internal/blob", []string{"internal/server", "internal/store", "internal/agent"}},
		// The dashboard sees the server only through its HTTP API, as the
		// token's owner would: what the API refuses, the page cannot do.
		{"internal/ui", []string{"internal/server", "internal/store", "internal/agent"}},
		// Placement is pure: books in, a plan out; the server deploys it.
		{"internal/ensemble", []string{"internal/server", "internal/store", "internal/agent", "internal/container", "internal/service", "net/http"}},
	}
	for _, r := range rules {
		for _, d := range deps(t, r.pkg) {
			for _, f := range r.forbidden {
				if d == module+f || strings.HasPrefix(d, module+f+"/") || d == f {
					t.Errorf("%s depends on %s; that crosses a layer", r.pkg, d)
				}
			}
		}
	}
	// The scheduler is pure logic: of nodemgr it imports errdefs only (and
	// so what errdefs imports), never a store, a provider or the server.
	allowed := map[string]bool{module + "internal/schedule": true}
	for _, d := range deps(t, "internal/errdefs") {
		allowed[d] = true
	}
	for _, d := range deps(t, "internal/schedule") {
		if strings.HasPrefix(d, module) && !allowed[d] {
			t.Errorf("internal/schedule depends on %s; it may use only internal/errdefs of nodemgr", d)
		}
	}
	// The wire types are for everyone: standard library only.
	for _, d := range deps(t, "api") {
		if strings.Contains(d, ".") && d != module+"api" {
			t.Errorf("api depends on %s; it must use the standard library only", d)
		}
	}
}
