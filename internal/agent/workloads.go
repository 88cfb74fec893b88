package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/artifact"
	"github.com/nodemgr/nodemgr/internal/portalloc"
	"github.com/nodemgr/nodemgr/internal/service"
)

// workloads are what the agent runs besides suites: nodee's artifacts and
// supervised services, with the node's port allocator. They live in the
// agent's data dir and prefix, so a restarted agent finds them again.
type workloads struct {
	log       *slog.Logger
	artifacts *artifact.Store
	ports     *portalloc.Allocator
	services  *service.Supervisor

	// changed wakes the presence publisher; capacity 1.
	changed chan struct{}

	mu       sync.Mutex
	presence api.Presence
}

func newWorkloads(cfg Config, log *slog.Logger) (*workloads, error) {
	w := &workloads{log: log, changed: make(chan struct{}, 1)}
	lo, hi, err := cfg.portRange()
	if err != nil {
		return nil, err
	}
	w.ports, err = portalloc.New(portalloc.Config{Min: lo, Max: hi, StatePath: filepath.Join(cfg.DataDir, "ports.json")})
	if err != nil {
		return nil, fmt.Errorf("port allocator: %w", err)
	}
	w.artifacts, err = artifact.New(cfg.Prefix, cfg.Depots, artifact.Options{
		Logger: log.With("component", "artifact"),
		InUse: func(id artifact.ID) bool {
			return len(w.services.UsedBy(id.String())) > 0
		},
	})
	if err != nil {
		return nil, err
	}
	w.services, err = service.New(service.Config{
		Prefix:    cfg.Prefix,
		StateDir:  filepath.Join(cfg.DataDir, "services"),
		Artifacts: artifactTrees{w.artifacts},
		Ports:     servicePorts{w.ports},
		Logger:    log.With("component", "service"),
		OnChange:  w.poke,
	})
	if err != nil {
		return nil, err
	}
	w.presence.LocalAPI = api.LocalAPI{Socket: cfg.LocalAPISocket, TCP: cfg.LocalAPIListen}
	return w, nil
}

// run supervises the services until ctx ends; they keep running after.
func (w *workloads) run(ctx context.Context) error {
	return w.services.Run(ctx)
}

func (w *workloads) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// currentPresence rebuilds the presence record from the live state.
func (w *workloads) currentPresence() api.Presence {
	p := api.Presence{Services: w.services.Summaries(), Artifacts: []string{}}
	if inst, err := w.artifacts.List(); err == nil {
		for _, a := range inst {
			p.Artifacts = append(p.Artifacts, a.ID.String())
		}
	}
	if p.Services == nil {
		p.Services = []api.ServiceSummary{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p.LocalAPI = w.presence.LocalAPI
	if !samePresence(p, w.presence) || w.presence.UpdatedAt.IsZero() {
		p.UpdatedAt = time.Now().UTC()
		w.presence = p
	}
	return w.presence
}

func samePresence(a, b api.Presence) bool {
	return slices.Equal(a.Services, b.Services) && slices.Equal(a.Artifacts, b.Artifacts) && a.LocalAPI == b.LocalAPI
}

// artifactInfo is an install as the API shows it, with its users.
func (w *workloads) artifactInfo(inst artifact.Installed) api.Artifact {
	return api.Artifact{
		ID: inst.ID.String(), Path: inst.Path, Source: inst.Source, Checksum: inst.Checksum,
		Size: inst.Size, Files: inst.Files, InstalledAt: inst.InstalledAt,
		UsedBy: w.services.UsedBy(inst.ID.String()),
	}
}

// artifactTrees lets services find installed artifacts.
type artifactTrees struct{ s *artifact.Store }

func (t artifactTrees) Tree(id string) (string, error) {
	pid, err := artifact.ParseID(id)
	if err != nil {
		return "", err
	}
	inst, err := t.s.Get(pid)
	if err != nil {
		return "", err
	}
	return inst.Path, nil
}

// servicePorts gives each service its one port from the node's allocator.
type servicePorts struct{ a *portalloc.Allocator }

func (p servicePorts) Allocate(owner string, port int) (int, error) {
	req := portalloc.Request{Count: 1}
	if port > 0 {
		req = portalloc.Request{Ports: []int{port}}
	}
	got, err := p.a.Allocate(owner, req)
	if err != nil {
		return 0, err
	}
	return got[0], nil
}

func (p servicePorts) Release(owner string) { p.a.ReleaseOwner(owner) }

func (p servicePorts) Holds(owner string, port int) bool {
	o, ok := p.a.Owner(port)
	return ok && o == owner
}
