package layering

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nodemgr/nodemgr/"

// A tier is a side of the architecture. Each tier may import the tiers
// listed for it in mayImport and nothing else of nodemgr's; the lists are
// closed (what a tier may import imports only what the tier may), so
// checking direct imports keeps the whole graph in order.
type tier string

const (
	tierAPI         tier = "api"         // wire types: the standard library only
	tierBase        tier = "base"        // mechanisms every side shares; no side of its own
	tierClient      tier = "client"      // the public Go client of the HTTP API
	tierDrivers     tier = "drivers"     // providers and executors, behind their interfaces
	tierNode        tier = "node"        // what runs on a machine: the agent and its workloads
	tierCoordinator tier = "coordinator" // the server, its store and its rooms
	tierTop         tier = "top"         // programs that wire the sides together, and tests of the whole
)

var mayImport = map[tier][]tier{
	tierAPI:         {tierAPI},
	tierBase:        {tierAPI, tierBase},
	tierClient:      {tierAPI, tierBase, tierClient},
	tierDrivers:     {tierAPI, tierBase, tierDrivers},
	tierNode:        {tierAPI, tierBase, tierNode},
	tierCoordinator: {tierAPI, tierBase, tierDrivers, tierCoordinator},
	tierTop:         {tierAPI, tierBase, tierClient, tierDrivers, tierNode, tierCoordinator, tierTop},
}

// tiers places every package of the module. A package without a row fails
// TestTiers: a new package must say which side it is on.
var tiers = map[string]tier{
	"api": tierAPI,

	"internal/base/archive":      tierBase,
	"internal/base/atomicfile":   tierBase,
	"internal/base/auth":         tierBase,
	"internal/base/paging":       tierBase,
	"internal/base/backoff":      tierBase,
	"internal/base/blobclient":   tierBase,
	"internal/base/cgroup":       tierBase,
	"internal/base/cleartext":    tierBase,
	"internal/base/clocktest":    tierBase,
	"internal/base/datadir":      tierBase,
	"internal/base/dockerengine": tierBase,
	"internal/base/errdefs":      tierBase,
	"internal/base/filecopy":     tierBase,
	"internal/base/fuzzcheck":    tierBase,
	"internal/base/httpapi":      tierBase,
	"internal/base/hw":           tierBase,
	"internal/base/humantime":    tierBase,
	"internal/base/humansize":    tierBase,
	"internal/base/imds":         tierBase,
	"internal/base/lockfile":     tierBase,
	"internal/base/procenv":      tierBase,
	"internal/base/proto":        tierBase,
	"internal/base/registry":     tierBase,
	"internal/base/sha256sum":    tierBase,
	"internal/base/syncbuf":      tierBase,
	"internal/base/tasklog":      tierBase,
	"internal/base/tick":         tierBase,
	"internal/base/tlsca":        tierBase,
	"internal/base/validate":     tierBase,
	"internal/base/workload":     tierBase,
	"internal/base/yamlfield":    tierBase,

	// Test helpers of base packages.
	"internal/base/tlsca/tlscatest":         tierBase,
	"internal/base/yamlfield/yamlfieldtest": tierBase,

	"client": tierClient,

	"internal/drivers/all":                           tierDrivers,
	"internal/drivers/execute":                       tierDrivers,
	"internal/drivers/execute/dockerexec":            tierDrivers,
	"internal/drivers/execute/executetest":           tierDrivers,
	"internal/drivers/execute/local":                 tierDrivers,
	"internal/drivers/execute/records":               tierDrivers,
	"internal/drivers/execute/rsync":                 tierDrivers,
	"internal/drivers/execute/sftp":                  tierDrivers,
	"internal/drivers/execute/ssh":                   tierDrivers,
	"internal/drivers/execute/ssh/sshtest":           tierDrivers,
	"internal/drivers/mapping":                       tierDrivers,
	"internal/drivers/provision":                     tierDrivers,
	"internal/drivers/provision/aws":                 tierDrivers,
	"internal/drivers/provision/aws/ec2test":         tierDrivers,
	"internal/drivers/provision/docker":              tierDrivers,
	"internal/drivers/provision/docker/dockertest":   tierDrivers,
	"internal/drivers/provision/libvirt":             tierDrivers,
	"internal/drivers/provision/libvirt/libvirttest": tierDrivers,
	"internal/drivers/provision/local":               tierDrivers,
	"internal/drivers/provision/provisiontest":       tierDrivers,
	"internal/drivers/provision/records":             tierDrivers,

	"internal/node/agent":                     tierNode,
	"internal/node/artifact":                  tierNode,
	"internal/node/artifact/artifacttest":     tierNode,
	"internal/node/capacity":                  tierNode,
	"internal/node/container":                 tierNode,
	"internal/node/gocrash":                   tierNode,
	"internal/node/names":                     tierNode,
	"internal/node/overlay":                   tierNode,
	"internal/node/portalloc":                 tierNode,
	"internal/node/proctree":                  tierNode,
	"internal/node/runas":                     tierNode,
	"internal/node/service":                   tierNode,
	"internal/node/workerpool":                tierNode,
	"internal/node/workerpool/workerpooltest": tierNode,
	"internal/node/workerproto":               tierNode,
	"worker":                                  tierNode, // linked into worker programs

	"internal/coordinator/blob":                  tierCoordinator,
	"internal/coordinator/catalog":               tierCoordinator,
	"internal/coordinator/dispatch":              tierCoordinator,
	"internal/coordinator/blob/blobtest":         tierCoordinator,
	"internal/coordinator/enroll":                tierCoordinator,
	"internal/coordinator/ensemble":              tierCoordinator,
	"internal/coordinator/ensemble/deploy":       tierCoordinator,
	"internal/coordinator/hub":                   tierCoordinator,
	"internal/coordinator/oncommand":             tierCoordinator,
	"internal/coordinator/orchestrate":           tierCoordinator,
	"internal/coordinator/overlay":               tierCoordinator,
	"internal/coordinator/schedule":              tierCoordinator,
	"internal/coordinator/server":                tierCoordinator,
	"internal/coordinator/server/replicatest":    tierCoordinator,
	"internal/coordinator/store":                 tierCoordinator,
	"internal/coordinator/store/migrate":         tierCoordinator,
	"internal/coordinator/store/postgres":        tierCoordinator,
	"internal/coordinator/store/postgres/pgtest": tierCoordinator,
	"internal/coordinator/store/sqlite":          tierCoordinator,
	"internal/coordinator/store/sqlstore":        tierCoordinator,
	"internal/coordinator/store/storemetrics":    tierCoordinator,
	"internal/coordinator/store/sqlrow":          tierCoordinator,
	"internal/coordinator/store/storetest":       tierCoordinator,
	"internal/coordinator/taskfiles":             tierCoordinator,
	"internal/coordinator/template":              tierCoordinator,
	"internal/coordinator/accounts":              tierCoordinator,
	"internal/coordinator/ui":                    tierCoordinator,

	"cmd/nodemgr":       tierTop,
	"internal/apidoc":   tierTop,
	"cmd/release":       tierTop,
	"internal/bench":    tierTop,
	"internal/cli":      tierTop,
	"internal/e2e":      tierTop,
	"internal/layering": tierTop,
	"internal/release":  tierTop,
}

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// modulePackages lists every package of the module with its imports.
func modulePackages(t *testing.T) map[string]pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = p
	}
	return pkgs
}

// TestTiers checks that every package has a tier and imports only what
// its tier may.
func TestTiers(t *testing.T) {
	pkgs := modulePackages(t)
	for name := range pkgs {
		if _, ok := tiers[name]; !ok {
			t.Errorf("package %s has no row in the tier table (internal/layering/deps_test.go): add one saying which side it is on", name)
		}
	}
	for name := range tiers {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("the tier table names %s, which is no package: remove its row", name)
		}
	}
	for name, p := range pkgs {
		from, ok := tiers[name]
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			to := tiers[dep]
			if slices.Contains(mayImport[from], to) {
				continue
			}
			t.Errorf("%s (%s) imports %s (%s); a %s package may import only %v", name, from, dep, to, from, mayImport[from])
		}
	}
}

// TestRooms holds the rules inside a tier: what a room must not reach,
// directly or not.
func TestRooms(t *testing.T) {
	pkgs := modulePackages(t)
	// The drivers themselves: only their registries, and the programs
	// that link them all (internal/drivers/all), may reach them.
	drivers := []string{
		"internal/drivers/all",
		"internal/drivers/provision/local", "internal/drivers/provision/docker",
		"internal/drivers/provision/libvirt", "internal/drivers/provision/aws",
		"internal/drivers/execute/local", "internal/drivers/execute/dockerexec", "internal/drivers/execute/ssh",
		"internal/drivers/execute/sftp", "internal/drivers/execute/rsync",
	}
	rules := []struct {
		pkg       string
		forbidden []string
		why       string
	}{
		{"internal/coordinator/store/sqlite", []string{"internal/coordinator/server", "net/http"}, "a store holds state; HTTP is the server's"},
		{"internal/coordinator/store/postgres", []string{"internal/coordinator/server", "net/http"}, "a store holds state; HTTP is the server's"},
		{"internal/coordinator/store/sqlrow", []string{"database/sql", "github.com/jackc/pgx/v5", "modernc.org/sqlite", "internal/coordinator/server"}, "what both SQL stores share knows no driver: each keeps its own"},
		{"internal/coordinator/store/sqlstore", []string{"database/sql", "github.com/jackc/pgx/v5", "modernc.org/sqlite", "internal/coordinator/server", "net/http"}, "what both SQL stores share knows no driver: each keeps its own"},
		{"internal/coordinator/orchestrate", []string{"internal/coordinator/server", "net/http", "internal/cli"}, "the orchestrator sees the server only through its Cluster interface"},
		{"internal/coordinator/template", []string{"internal/coordinator/server", "internal/coordinator/store"}, "templates render without state"},
		{"internal/coordinator/blob", []string{"internal/coordinator/server", "internal/coordinator/store"}, "the blob store keeps bytes; who may read them is the server's call"},
		{"internal/coordinator/ui", []string{"internal/coordinator/server", "internal/coordinator/store"}, "the dashboard sees the server only through its HTTP API, as the token's owner would"},
		{"internal/coordinator/ensemble", []string{"internal/coordinator/server", "internal/coordinator/store", "net/http"}, "placement is pure: books in, a plan out; the server deploys it"},
		{"internal/coordinator/dispatch", append([]string{"internal/coordinator/server", "internal/coordinator/hub", "internal/base/httpapi", "internal/base/proto"}, drivers...), "dispatch reads the store and the agents' sessions through the small interfaces it declares (the pools' too; it tells the orchestrator its demands), and knows no HTTP or agent protocol (its Prometheus counters link net/http, which it does not use)"},
		{"internal/coordinator/catalog", append([]string{"internal/coordinator/server", "internal/coordinator/orchestrate", "net/http"}, drivers...), "the catalog makes drivers through their registries and knows no HTTP; the orchestrator and the server use it"},
		{"internal/coordinator/ensemble/deploy", append([]string{"internal/coordinator/server", "net/http"}, drivers...), "ensembles run through the small interfaces they declare: the server's sessions reach the agents"},
		{"internal/coordinator/overlay", append([]string{"internal/coordinator/server", "internal/coordinator/hub", "net/http"}, drivers...), "the overlay reaches the agents through the Agents interface it declares"},
		{"internal/coordinator/hub", append([]string{"internal/coordinator/server", "internal/coordinator/dispatch", "internal/coordinator/orchestrate", "internal/coordinator/catalog"}, drivers...), "the hub keeps sessions, liveness and leases; it reaches the rest of the server only through its Hooks"},
		{"internal/coordinator/enroll", append([]string{"internal/coordinator/server", "internal/coordinator/hub", "internal/coordinator/dispatch", "internal/base/httpapi"}, drivers...), "enrollment checks tokens and machines against the store; the server authenticates and answers"},
		{"internal/coordinator/oncommand", append([]string{"internal/coordinator/server", "internal/coordinator/hub", "internal/base/httpapi"}, drivers...), "container commands reach agents and check roles only through the Hooks the server gives"},
		{"internal/coordinator/accounts", append([]string{"internal/coordinator/server", "internal/coordinator/hub", "internal/base/httpapi", "net/http"}, drivers...), "users and tokens are kept here, and who may ask for what is decided here; the server authenticates and answers"},
		{"internal/coordinator/taskfiles", append([]string{"internal/coordinator/server", "internal/coordinator/hub", "internal/base/httpapi"}, drivers...), "who may reach a task file is asked of the store here; the server authenticates and streams"},
		{"internal/coordinator/server", drivers, "the server makes providers and executors through their registries; internal/drivers/all links them in at the top"},
		{"internal/coordinator/orchestrate", drivers, "the orchestrator asks the registries what a driver is, never names one"},
		{"internal/coordinator/ui", drivers, "the dashboard lists the registered providers, never names one"},
		{"internal/coordinator/template", drivers, "templates render for the registered providers, never name one"},
		{"internal/drivers/mapping", drivers, "mappings check overrides against the providers' records, never name one"},
		{"internal/drivers/provision/libvirt", []string{"internal/drivers/execute"}, "a provider makes machines; executors reach them"},
		{"internal/drivers/provision/aws", []string{"internal/drivers/execute"}, "a provider makes machines; executors reach them"},
		{"internal/node/service", []string{"internal/node/portalloc"}, "the agent allocates ports; a service is given its port"},
		{"internal/node/container", []string{"internal/node/portalloc"}, "the agent allocates ports; a container is given its ports"},
		{"internal/node/runas", []string{"internal/node/agent", "internal/node/workerpool", "internal/node/service"}, "who code runs as is asked by the agent, its pools and its services"},
		{"internal/node/gocrash", []string{"internal/node/agent", "internal/node/workerpool"}, "linked into worker programs: nothing of the agent's"},
		{"internal/node/proctree", []string{"internal/node/agent", "internal/node/workerpool"}, "linked into worker programs: nothing of the agent's"},
		{"worker", []string{"internal/node/agent", "internal/node/workerpool"}, "linked into worker programs: nothing of the agent's"},
		{"internal/node/workerpool", []string{"internal/node/agent"}, "pools are the agent's tool, not the other way round"},
		{"internal/base/proto", []string{"internal/coordinator", "internal/node"}, "the agent protocol is both sides'"},
	}
	for _, r := range rules {
		p, ok := pkgs[r.pkg]
		if !ok {
			t.Errorf("rule for %s: no such package", r.pkg)
			continue
		}
		for _, d := range p.Deps {
			for _, f := range r.forbidden {
				if d == module+f || strings.HasPrefix(d, module+f+"/") || d == f {
					t.Errorf("%s depends on %s: %s", r.pkg, d, r.why)
				}
			}
		}
	}
	// The scheduler is pure logic: of nodemgr it imports errdefs only (and
	// what errdefs imports), never a store, a provider or the server.
	allowed := map[string]bool{module + "internal/coordinator/schedule": true, module + "internal/base/errdefs": true}
	for _, d := range pkgs["internal/base/errdefs"].Deps {
		allowed[d] = true
	}
	for _, d := range pkgs["internal/coordinator/schedule"].Deps {
		if strings.HasPrefix(d, module) && !allowed[d] {
			t.Errorf("internal/coordinator/schedule depends on %s; it may use only internal/base/errdefs of nodemgr", d)
		}
	}
	// The wire types are for everyone: standard library only.
	for _, d := range pkgs["api"].Deps {
		if strings.Contains(d, ".") {
			t.Errorf("api depends on %s; it must use the standard library only", d)
		}
	}
}

// TestAgentOnlyBuild: nodemgr built with -tags agentonly (what pool
// machines can run) links no server, driver, bench or release code. Go
// initializes every package a binary links, used or not, and their code,
// tables and type descriptors then stay resident in the agent.
func TestAgentOnlyBuild(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "agentonly", "-deps", module+"cmd/nodemgr").Output()
	if err != nil {
		t.Fatalf("go list -tags agentonly: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"internal/node/agent") {
		t.Fatalf("the agent-only build does not link internal/node/agent; deps: %v", deps)
	}
	top := []string{"cmd/nodemgr", "internal/cli"} // the top-tier packages it may link
	for _, d := range deps {
		name, ours := strings.CutPrefix(d, module)
		if !ours {
			continue
		}
		switch tier := tiers[name]; tier {
		case tierCoordinator, tierDrivers:
			t.Errorf("the agent-only build links %s (%s): only the agent's side belongs in it; keep the file that imports it behind //go:build !agentonly", name, tier)
		case tierTop:
			if !slices.Contains(top, name) {
				t.Errorf("the agent-only build links %s: keep the file that imports it behind //go:build !agentonly", name)
			}
		}
	}
}

// TestClientOnlyBuild: nodemgr built with -tags clientonly (what a
// workstation needs to talk to a server) links no server, agent, store or
// driver code, and no cloud SDK or engine client: only the drivers'
// records, to check templates and name them. Its command lines start in
// a third of the whole binary's time.
func TestClientOnlyBuild(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "clientonly", "-deps", module+"cmd/nodemgr").Output()
	if err != nil {
		t.Fatalf("go list -tags clientonly: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, want := range []string{"client", "internal/drivers/provision/records", "internal/drivers/mapping"} {
		if !slices.Contains(deps, module+want) {
			t.Fatalf("the client build does not link %s; deps: %v", want, deps)
		}
	}
	// What a client may link of the lower tiers: the drivers' registries
	// and records, and what templates are checked with.
	allowed := []string{"cmd/nodemgr", "internal/cli", "client",
		"internal/drivers/provision", "internal/drivers/execute", "internal/drivers/mapping",
		"internal/drivers/provision/records", "internal/drivers/execute/records",
		"internal/coordinator/template", "internal/coordinator/schedule"}
	for _, d := range deps {
		name, ours := strings.CutPrefix(d, module)
		switch {
		case !ours:
			for _, heavy := range []string{"aws-sdk-go", "docker/docker", "moby", "prometheus", "jackc/pgx", "modernc.org/sqlite", "go-libvirt", "opentelemetry"} {
				if strings.Contains(d, heavy) {
					t.Errorf("the client build links %s: keep the file that imports it behind //go:build !clientonly", d)
				}
			}
		case tiers[name] == tierBase || tiers[name] == tierAPI || slices.Contains(allowed, name):
		default:
			t.Errorf("the client build links %s (%s): keep the file that imports it behind //go:build !clientonly", name, tiers[name])
		}
	}
}
