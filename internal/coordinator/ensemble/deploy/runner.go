package deploy

import (
	"context"
	"log/slog"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Store is what the Runner keeps ensembles in and reads nodes and users
// from.
type Store interface {
	CreateEnsemble(ctx context.Context, e api.Ensemble) error
	GetEnsemble(ctx context.Context, ref string) (api.Ensemble, error)
	ListEnsembles(ctx context.Context, all bool) ([]api.Ensemble, error)
	UpdateEnsemble(ctx context.Context, id string, fn func(*api.Ensemble) error) (api.Ensemble, error)
	GetNode(ctx context.Context, id string) (store.Node, error)
	ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error)
	FindContainer(ctx context.Context, id string) ([]api.Container, error)
	GetUser(ctx context.Context, name string) (store.User, error)
}

// Agents reaches the nodes' agents, which only the server can: through
// the session it holds, or relayed by the server that holds it.
type Agents interface {
	// Connected says whether n's agent is connected to a server.
	Connected(n store.Node) bool
	// Call sends a request to n's local API and decodes its JSON answer
	// into out; an error answer comes back as that error.
	Call(ctx context.Context, n store.Node, method, path string, in, out any) error
	// RunContainer deploys job on n and records the agent's answer.
	RunContainer(ctx context.Context, n store.Node, job api.ContainerJob) (api.Container, error)
	// DeleteContainer deletes job id on n and records the result.
	DeleteContainer(ctx context.Context, n store.Node, id string) (api.Container, error)
	// Host is the address n's workloads answer on, as far as the server
	// knows.
	Host(nodeID, name string) string
	// Meshed says whether the nodes are all on the overlay network and
	// peers of each other: their workloads then reach each other by the
	// overlay's names.
	Meshed(nodeIDs []string) bool
	// Presence is what n's agent last published, nil while it is not
	// connected here.
	Presence(nodeID string) *api.Presence
}

// Pools start machines for ensembles that fit nowhere;
// *orchestrate.Orchestrator is one.
type Pools interface {
	PoolsFor(ctx context.Context, d orchestrate.Demand) ([]string, error)
	ForSuite(ctx context.Context, suite string) string
	Wake()
}

// Config holds the deadlines an ensemble's spec does not set.
type Config struct {
	// RestoreDeadline is how long a node must be lost before its replicas
	// are placed again elsewhere.
	RestoreDeadline time.Duration
	// ProvisionDeadline is how long an ensemble may wait for machines.
	ProvisionDeadline time.Duration
}

// Runner deploys, restores and shuts down ensembles.
type Runner struct {
	store  Store
	agents Agents
	// pools are the orchestrator's, nil where there is none (yet): then
	// nothing waits for machines.
	pools func() Pools
	cfg   Config
	log   *slog.Logger
	// restoreFailures keeps the failures to place a lost replica again
	// out of the log but for their news.
	restoreFailures failures
}

// New returns a Runner over st and ag; pools gives the orchestrator once
// there is one.
func New(st Store, ag Agents, pools func() Pools, cfg Config, log *slog.Logger) *Runner {
	return &Runner{store: st, agents: ag, pools: pools, cfg: cfg, log: log}
}

// SetLogger replaces the Runner's logger (tests count what it logs).
func (r *Runner) SetLogger(log *slog.Logger) { r.log = log }
