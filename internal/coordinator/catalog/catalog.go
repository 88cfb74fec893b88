package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Store is what the catalog keeps its documents and deployments in.
type Store interface {
	PutDocument(ctx context.Context, d store.Document) (store.Document, error)
	GetDocument(ctx context.Context, kind, name string) (store.Document, error)
	ListDocuments(ctx context.Context, kind string, p store.Page) ([]store.Document, error)
	DeleteDocument(ctx context.Context, kind, name string) error
	CreateDeployment(ctx context.Context, d store.Deployment) error
	GetDeployment(ctx context.Context, id string) (store.Deployment, error)
	ListDeployments(ctx context.Context, f store.DeploymentFilter) ([]store.Deployment, error)
	UpdateDeployment(ctx context.Context, id string, fn func(*store.Deployment) error) (store.Deployment, error)
}

// Config is the drivers' settings and the drift check's period.
type Config struct {
	// ProviderSettings holds each provider's settings by name.
	ProviderSettings map[string]map[string]string
	// ExecutorSettings holds each executor's settings by name.
	ExecutorSettings map[string]map[string]string
	// DriftInterval is how often DriftLoop asks providers about the
	// machines they made.
	DriftInterval time.Duration
	// Started is when the server began serving: a deployment pending
	// since before it was cut off by a stop.
	Started time.Time
}

// Catalog makes providers and executors once each, renders templates
// for them, and keeps the deployments they made.
type Catalog struct {
	store     Store
	cfg       Config
	log       *slog.Logger
	providers providers
	executors executors
}

// New returns a catalog over st. Executor settings that no executor
// takes, or that it would refuse, are refused here.
func New(st Store, cfg Config, log *slog.Logger) (*Catalog, error) {
	if err := CheckExecutorSettings(cfg.ExecutorSettings); err != nil {
		return nil, err
	}
	return &Catalog{store: st, cfg: cfg, log: log,
		providers: providers{settings: cfg.ProviderSettings},
		executors: executors{settings: cfg.ExecutorSettings}}, nil
}

// SetStarted records when the server began serving (see Config.Started).
func (c *Catalog) SetStarted(t time.Time) { c.cfg.Started = t }

// Close closes the providers and executors that hold connections.
func (c *Catalog) Close() error { return errors.Join(c.providers.close(), c.executors.close()) }

// Provider is the named provider, made with its settings on first use.
func (c *Catalog) Provider(name string) (provision.Provider, error) { return c.providers.get(name) }

// Executor is the deployment's executor for commands (exec:docker,
// exec:ssh, exec:local), which copies too: an agent goes in through it.
func (c *Catalog) Executor(d provision.Deployment) (execute.Executor, error) {
	name, err := pickExecutor(d.Name, d.Executors, "", false)
	if err != nil {
		return nil, fmt.Errorf("machine %s (provider %s) offers no executor nodemgr can bootstrap an agent through (it offers %s): %w",
			d.Name, d.Provider, offered(d.Executors), errdefs.ErrInvalid)
	}
	e, err := c.executors.get(name, c.cfg.ProviderSettings)
	if err != nil {
		return nil, err
	}
	return e, execute.Check(e, d)
}

// provisionTimeout bounds one machine's provisioning.
const provisionTimeout = 10 * time.Minute

// Provision records req.Count machines of a template, named req.Name
// (numbered when more than one), pending, and makes each in the
// background; the records come back at once.
func (c *Catalog) Provision(ctx context.Context, req api.ProvisionRequest) ([]api.Deployment, error) {
	pr, err := c.providers.get(req.Provider)
	if err != nil {
		return nil, err
	}
	rendered, err := c.Render(ctx, req.Template, req.Provider)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	out := []api.Deployment{}
	for i := range req.Count {
		id := auth.NewID("d-")
		name := req.Name
		if req.Count > 1 {
			name = fmt.Sprintf("%s-%d", req.Name, i+1)
		}
		d := store.Deployment{ID: id, Provider: req.Provider, Name: name, Template: req.Template,
			State: provision.StatePending, Extra: rendered.Extra, CreatedAt: now,
			Labels: map[string]string{"nodemgr.deployment": id, "nodemgr.template": req.Template}}
		if err := c.store.CreateDeployment(ctx, d); err != nil {
			return out, fmt.Errorf("provision %s: %w", name, err)
		}
		out = append(out, APIDeployment(d))
		go c.provisionOne(pr, d)
	}
	return out, nil
}

// Destroy removes a deployment's machine, if it has one, and keeps the
// record as terminated, for history, saying who destroyed it.
func (c *Catalog) Destroy(ctx context.Context, d store.Deployment, by string) (store.Deployment, error) {
	if d.State == provision.StatePending {
		return d, errdefs.Conflict("deployment %s is still being provisioned; destroy it once it is running or failed", d.Name)
	}
	if d.ResourceID != "" && d.State != provision.StateTerminated {
		pr, err := c.providers.get(d.Provider)
		if err != nil {
			return d, err
		}
		if err := pr.Destroy(ctx, d.Machine()); err != nil {
			return d, fmt.Errorf("destroy %s: %w", d.Name, err)
		}
	}
	return c.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
		cur.State, cur.StateReason = provision.StateTerminated, "destroyed by "+by
		return nil
	})
}

// Lifecycle performs start, stop, hibernate, reboot or terminate on a
// deployment's machine and records the state its provider then reports;
// a verb the provider cannot do is refused before anything is touched.
func (c *Catalog) Lifecycle(ctx context.Context, d store.Deployment, verb string) (store.Deployment, error) {
	if err := CheckVerb(verb); err != nil {
		return d, err
	}
	if d.ResourceID == "" || d.State == provision.StateTerminated || d.State == api.DeploymentFailed {
		return d, errdefs.Conflict("deployment %s is %s; there is no machine to %s", d.Name, d.State, verb)
	}
	pr, err := c.providers.get(d.Provider)
	if err != nil {
		return d, err
	}
	if err := provision.Do(ctx, pr, verb, d.Machine()); err != nil {
		return d, fmt.Errorf("%s %s: %w", verb, d.Name, err)
	}
	state, reason, err := observedState(ctx, pr.(provision.Lifecycle), d.Machine())
	if err != nil {
		return d, err
	}
	return c.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
		cur.State, cur.StateReason = state, reason
		return nil
	})
}

// CheckVerb refuses a lifecycle verb no provider knows.
func CheckVerb(verb string) error {
	if !slices.Contains(provision.Verbs, verb) {
		return errdefs.Field("verb", "unknown lifecycle verb %q; use one of %v", verb, provision.Verbs)
	}
	return nil
}
