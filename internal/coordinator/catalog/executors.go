package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// executors makes each executor once, through its registration record:
// with its executor settings, the provider settings (the docker one
// reaches the engine the docker provider's host names), and the other
// executors it goes through (sftp and rsync over ssh's connections).
type executors struct {
	settings map[string]map[string]string // Config.ExecutorSettings

	mu   sync.Mutex
	made map[string]execute.Executor
}

// CheckExecutorSettings refuses settings for an executor that takes none,
// and settings the executor would refuse, before the server starts.
func CheckExecutorSettings(settings map[string]map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		s := settings[name]
		field := "executor_settings." + name
		d, err := execute.Lookup(field, name)
		switch {
		case err == nil && d.SettingsOf != "":
			if len(s) > 0 {
				return errdefs.Field(field, "the %s executor takes the %s executor's settings; set them under %s", name, d.SettingsOf, d.SettingsOf)
			}
		case err == nil && len(d.Settings) > 0:
			e, err := d.New(execute.Env{Settings: s})
			if err != nil {
				return err
			}
			if c, ok := e.(io.Closer); ok {
				c.Close()
			}
		default:
			return errdefs.Field(field, "no executor %q takes settings (%s)", name, settingsTakers())
		}
	}
	return nil
}

// settingsTakers says which executors take settings, and which: "ssh
// does: user, port, ...".
func settingsTakers() string {
	var out []string
	for _, d := range execute.Drivers() {
		if len(d.Settings) > 0 {
			out = append(out, d.Name+" does: "+strings.Join(d.Settings, ", "))
		}
	}
	return strings.Join(out, "; ")
}

// close closes the executors that hold connections.
func (x *executors) close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var errs []error
	for _, e := range x.made {
		if c, ok := e.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	x.made = nil
	return errors.Join(errs...)
}

func (x *executors) get(name string, settings map[string]map[string]string) (execute.Executor, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.getLocked(name, settings)
}

func (x *executors) getLocked(name string, settings map[string]map[string]string) (execute.Executor, error) {
	if e := x.made[name]; e != nil {
		return e, nil
	}
	d, err := execute.Lookup("executor", name)
	if err != nil {
		return nil, errdefs.NotFound("executor %q", name)
	}
	e, err := d.New(execute.Env{
		Settings:  x.settings[name],
		Providers: settings,
		Executor:  func(other string) (execute.Executor, error) { return x.getLocked(other, settings) },
	})
	if err != nil {
		return nil, err
	}
	if x.made == nil {
		x.made = map[string]execute.Executor{}
	}
	x.made[name] = e
	return e, nil
}

// pickExecutor names the executor for a command (copy false) or a copy
// on a deployment carrying capabilities: via when given, which it must
// carry; else, in the deployment's order, the first exec: capability for
// a command and the first copy: capability for a copy, falling back to
// the first executor it carries (local and docker copy too; sftp and
// rsync run commands through ssh).
func pickExecutor(name string, capabilities []string, via string, copy bool) (string, error) {
	if via != "" {
		d, err := execute.Lookup("via", via)
		if err != nil {
			return "", err
		}
		if !slices.Contains(capabilities, d.Capability) {
			return "", errdefs.Field("via", "deployment %s does not offer the %s executor (%s); it offers %s", name, via, d.Capability, offered(capabilities))
		}
		return via, nil
	}
	prefix := "exec:"
	if copy {
		prefix = "copy:"
	}
	first := ""
	for _, c := range capabilities {
		d, ok := execute.ByCapability(c)
		if !ok {
			continue
		}
		if strings.HasPrefix(c, prefix) {
			return d.Name, nil
		}
		if first == "" {
			first = d.Name
		}
	}
	if first == "" {
		return "", errdefs.ErrNotFound
	}
	return first, nil
}

// offered lists the executors capabilities name: "ssh (exec:ssh), sftp
// (copy:sftp)", or none.
func offered(capabilities []string) string {
	var out []string
	for _, c := range capabilities {
		if d, ok := execute.ByCapability(c); ok {
			out = append(out, d.Name+" ("+c+")")
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// capabilities lists what the executors take, "exec:local, ... or
// copy:rsync".
func capabilities() string {
	var cs []string
	for _, d := range execute.Drivers() {
		cs = append(cs, d.Capability)
	}
	return validate.OrList(cs)
}

// ExecTarget resolves a deployment and picks its executor: the one via
// names, or the default for a command or a copy (see pickExecutor).
func (c *Catalog) ExecTarget(ctx context.Context, ref, via string, copy bool) (provision.Deployment, execute.Executor, error) {
	d, err := c.ResolveDeployment(ctx, ref)
	if err != nil {
		return provision.Deployment{}, nil, err
	}
	switch d.State {
	case provision.StatePending:
		return provision.Deployment{}, nil, errdefs.Conflict("deployment %s is still being provisioned; try again once it is running", d.Name)
	case provision.StateTerminated:
		return provision.Deployment{}, nil, errdefs.Conflict("deployment %s is terminated; there is no machine to reach", d.Name)
	}
	pd := d.Machine()
	name, err := pickExecutor(d.Name, d.Executors, via, copy)
	switch {
	case err == nil:
		e, err := c.executors.get(name, c.cfg.ProviderSettings)
		if err != nil {
			return pd, nil, err
		}
		return pd, e, execute.Check(e, pd)
	case !errors.Is(err, errdefs.ErrNotFound):
		return pd, nil, err
	}
	has := "none"
	if len(d.Executors) > 0 {
		has = strings.Join(d.Executors, ", ")
	}
	why := ""
	if d.State == api.DeploymentFailed {
		why = "; it failed to provision: " + d.StateReason
	}
	return pd, nil, fmt.Errorf("deployment %s (provider %s, %s) carries no executor capability (it has %s); commands and copies need one of %s%s: %w",
		d.Name, d.Provider, d.State, has, capabilities(), why, errdefs.ErrInvalid)
}
