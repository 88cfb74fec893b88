// Package local is the "local" provider: the one machine it hands out is
// the host nodemgr itself runs on. It is INSECURE, meant for tests and
// single-machine trials: whatever runs on its deployments runs on that
// host, unsandboxed, with nodemgr's own privileges.
//
// Provision makes nothing; it describes the host (ResourceID is its
// hostname) with the capabilities exec:local and copy:local, which the
// local executor (execute/local) takes, and says in Extra["warning"] (and
// on Logger, if set) that it is insecure. Destroy leaves the host alone.
// There is no lifecycle: provision.Do refuses every verb.
package local

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/records"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Warning is put in every deployment's Extra["warning"].
const Warning = "insecure: the local provider hands out the nodemgr host itself; commands run there unsandboxed, with nodemgr's privileges; use it for testing only"

// Capabilities of a local deployment.
const (
	CapExec = "exec:local"
	CapCopy = "copy:local"
)

func init() {
	d := records.Local
	d.New = func(settings map[string]string) (provision.Provider, error) { return New(settings) }
	d.HostNetwork = func(map[string]any) bool { return true }
	provision.Register(d)
}

// Local hands out the host it runs on.
type Local struct {
	// Logger, if set, gets a warning for every Provision.
	Logger *slog.Logger
}

// New returns the local provider; it takes no settings.
func New(settings map[string]string) (*Local, error) {
	for k := range settings {
		return nil, errdefs.Field("settings."+k, "the local provider takes no settings")
	}
	return &Local{}, nil
}

// Name is "local".
func (l *Local) Name() string { return "local" }

// Provision returns the host as a deployment. Extra is kept as given (no
// key applies to the host) plus "warning".
func (l *Local) Provision(ctx context.Context, spec provision.Spec) (provision.Deployment, error) {
	if err := ctx.Err(); err != nil {
		return provision.Deployment{}, err
	}
	host, err := os.Hostname()
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: hostname: %w", spec.Name, err)
	}
	name := spec.Name
	if name == "" {
		name = host
	}
	extra := maps.Clone(spec.Extra)
	if extra == nil {
		extra = map[string]any{}
	}
	extra["warning"] = Warning
	if l.Logger != nil {
		l.Logger.Warn("local provider: handing out this host", "deployment", name, "host", host, "warning", Warning)
	}
	return provision.Deployment{
		Provider:   "local",
		ResourceID: host,
		Name:       name,
		Template:   spec.Template,
		State:      provision.StateRunning,
		Address:    "localhost",
		Executors:  []string{CapExec, CapCopy},
		Extra:      extra,
		Labels:     maps.Clone(spec.Labels),
		CreatedAt:  time.Now().UTC(),
	}, nil
}

// Destroy does nothing: the host is not the provider's to remove.
func (l *Local) Destroy(ctx context.Context, d provision.Deployment) error { return nil }

var _ provision.Provider = (*Local)(nil)
