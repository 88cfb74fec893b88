// Package provision makes and unmakes machines for nodemgr: the Provider
// interface, its optional capabilities, and the registry drivers join.
//
// A provider gets the flat Extra map that template.Render produced for it
// (template fields, overrides, mappings) and returns a Deployment that the
// server stores. Lifecycle control is an optional capability interface,
// found by type assertion; a verb a provider cannot perform is refused
// before anything is touched (Vagrant's Docker "suspend" is the lesson).
//
// Drivers live in sub-packages (provision/local, provision/docker,
// provision/libvirt, provision/aws) and register a Driver record from init;
// package drivers/all imports them all. Everyone else asks the registry
// (Lookup, Names, New) rather than naming a provider.
package provision

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/registry"
)

// EC2-style lifecycle states.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateHibernated   = "hibernated"
)

// Lifecycle verbs.
const (
	VerbStart     = "start"
	VerbStop      = "stop"
	VerbHibernate = "hibernate"
	VerbReboot    = "reboot"
	VerbTerminate = "terminate"
)

// Verbs are all lifecycle verbs, in a stable order.
var Verbs = []string{VerbStart, VerbStop, VerbHibernate, VerbReboot, VerbTerminate}

// ErrNoCapacity is a Provision the backend refused for want of capacity
// or quota now (EC2's InsufficientInstanceCapacity, a spot request's
// capacity-not-available, an account limit): the same request at once
// gets the same answer, so a caller tries another template or provider
// rather than again. It is errdefs.ErrUnavailable too.
var ErrNoCapacity error = noCapacity{}

type noCapacity struct{}

func (noCapacity) Error() string        { return "no capacity" }
func (noCapacity) Is(target error) bool { return target == errdefs.ErrUnavailable }

// Spec asks a provider for one machine.
type Spec struct {
	Name     string            // machine name, unique per provider
	Template string            // the template it was rendered from
	Extra    map[string]any    // the rendered template for this provider
	Labels   map[string]string // attached to the provider's resource, so nodemgr can find it again
	// UserData, when set, is the cloud-init user data the machine boots
	// with (a provider that is a CloudInit and said yes to PullBootstrap
	// passes it); it holds a secret and is never stored or shown.
	UserData string
}

// Deployment is a machine a provider made.
type Deployment struct {
	ID         string            // nodemgr's ID
	Provider   string            // provider name
	ResourceID string            // the provider's own ID: container ID, domain UUID, instance ID
	Name       string            // machine name
	Template   string            // template it came from
	State      string            // State*
	Address    string            // where to reach it, if it has an address
	Executors  []string          // capabilities: exec:local, exec:docker, exec:ssh, copy:sftp, copy:rsync
	Extra      map[string]any    // what it was provisioned with
	Labels     map[string]string // on the provider's resource
	CreatedAt  time.Time
}

// Resource returns the deployment's ResourceID, or an ErrInvalid on
// resource_id when it has none; what names the ID for people ("instance
// ID", "container ID").
func (d Deployment) Resource(what string) (string, error) {
	if d.ResourceID == "" {
		return "", errdefs.Field("resource_id", "deployment %s has no %s", d.Name, what)
	}
	return d.ResourceID, nil
}

// Provider makes and unmakes machines.
type Provider interface {
	Name() string
	// Provision creates one machine and returns it once the provider says
	// it runs. On error nothing may be left behind: the provider cleans up
	// what it made.
	Provision(ctx context.Context, spec Spec) (Deployment, error)
	// Destroy removes the machine; destroying one that is gone is not an error.
	Destroy(ctx context.Context, d Deployment) error
}

// Lifecycle is the optional capability of controlling a machine after it
// was made. Verbs lists what the provider can really do.
type Lifecycle interface {
	Verbs() []string
	Start(ctx context.Context, d Deployment) error
	Stop(ctx context.Context, d Deployment) error
	Hibernate(ctx context.Context, d Deployment) error
	Reboot(ctx context.Context, d Deployment) error
	Terminate(ctx context.Context, d Deployment) error
	// State reports the machine's state now; StateTerminated when it is gone.
	State(ctx context.Context, d Deployment) (string, error)
}

// VerbChecker is the optional capability of a Lifecycle whose verbs depend
// on how each machine was made: an EC2 one-time spot instance cannot be
// stopped, and only one launched with hibernation enabled can hibernate.
// Do asks it after Verbs and before anything is touched.
type VerbChecker interface {
	// CheckVerb returns nil if d can do verb (one of Verbs()), else an
	// errdefs.ErrInvalid for the field "verb" that names the rule. It
	// looks at d alone (its Extra), never at the provider's API.
	CheckVerb(d Deployment, verb string) error
}

// CloudInit is the optional capability of a provider whose machines run
// cloud-init on user data nodemgr gives them (Spec.UserData): EC2's user
// data, a libvirt NoCloud seed. Such a machine fetches its agent from the
// server itself (pull bootstrap), with no SSH before its agent runs.
type CloudInit interface {
	// PullBootstrap says whether a machine made from extra runs
	// cloud-init on Spec.UserData: its image has cloud-init, the template
	// leaves the user data to nodemgr, and it did not ask for
	// bootstrap: push.
	PullBootstrap(extra map[string]any) bool
}

// ExtraBootstrap is the Extra key a template sets to push to have its
// machines bootstrapped over SSH even where the provider could give them
// user data (an image without cloud-init).
const ExtraBootstrap = "bootstrap"

// ExtraSSHHostKey is the deployment Extra key that pins a machine's SSH
// host key (an authorized_keys line): the orchestrator made the key and
// gave it to the machine in its user data, so the ssh executors check the
// machine against it, not against known_hosts.
const ExtraSSHHostKey = "ssh_host_key"

// Locality is the optional capability of a provider that knows whether
// its machines run on the server's own host (the prefer-local policy
// ranks those first). A provider without it is local when its Driver
// record says OnHost.
type Locality interface {
	Local() bool
}

// Archer is the optional capability of a provider that can tell from a
// rendered template's Extra which architecture its machine would have
// (x86_64, aarch64, arm64 ... as the provider names it), so that the
// scheduler can refuse a candidate of the wrong one; "" when it cannot
// tell. A provider without it whose Driver record says OnHost (docker,
// local) makes machines of the server's own architecture.
type Archer interface {
	MachineArch(extra map[string]any) string
}

// StateReasoner is the optional capability of a Lifecycle that says why a
// machine is in its state, in words a person can act on: an EC2 spot
// instance that AWS took back, a launch that failed for want of capacity.
// The server stores the reason beside the state.
type StateReasoner interface {
	// StateReason is State with the reason for it; the reason is empty
	// when there is nothing to say (a machine running, or stopped by
	// nodemgr).
	StateReason(ctx context.Context, d Deployment) (state, reason string, err error)
}

// Noticer is the optional capability of a provider whose machines hear
// notices about themselves from a metadata service on the machine (EC2's
// instance metadata service: spot interruption notices and rebalance
// recommendations). The orchestrator turns the agent's watch on for the
// machines it returns an endpoint for, so that they drain and are
// replaced before the provider takes them.
type Noticer interface {
	// NoticeEndpoint is the URL of the metadata service d's agent
	// polls, as the machine reaches it; "" when d gets no notices.
	NoticeEndpoint(d Deployment) string
}

// Do performs a lifecycle verb on a deployment, refusing, before anything is
// touched, a verb the provider cannot do (Verbs) or this machine cannot
// (VerbChecker).
func Do(ctx context.Context, p Provider, verb string, d Deployment) error {
	lc, ok := p.(Lifecycle)
	if !ok {
		return fmt.Errorf("provider %s has no lifecycle control: %w", p.Name(), errdefs.Field("verb", "%s is not supported by provider %s", verb, p.Name()))
	}
	if !slices.Contains(Verbs, verb) {
		return errdefs.Field("verb", "unknown lifecycle verb %q; use one of %v", verb, Verbs)
	}
	if !slices.Contains(lc.Verbs(), verb) {
		return errdefs.Field("verb", "provider %s cannot %s a machine; it can %v", p.Name(), verb, lc.Verbs())
	}
	if vc, ok := p.(VerbChecker); ok {
		if err := vc.CheckVerb(d, verb); err != nil {
			return err
		}
	}
	switch verb {
	case VerbStart:
		return lc.Start(ctx, d)
	case VerbStop:
		return lc.Stop(ctx, d)
	case VerbHibernate:
		return lc.Hibernate(ctx, d)
	case VerbReboot:
		if err := rebootable(ctx, lc, d); err != nil {
			return err
		}
		return lc.Reboot(ctx, d)
	}
	return lc.Terminate(ctx, d)
}

// rebootable refuses to reboot a stopped machine, as EC2 does
// (IncorrectInstanceState): a reboot that starts it would hide that it was
// stopped, and starting is a verb of its own.
func rebootable(ctx context.Context, lc Lifecycle, d Deployment) error {
	st, err := lc.State(ctx, d)
	if err != nil {
		return fmt.Errorf("reboot %s: %w", d.Name, err)
	}
	if st == StateStopped {
		return errdefs.Conflict("reboot %s: it is stopped, and only a running machine reboots; start it with `nodemgr lifecycle start %s`", d.Name, d.Name)
	}
	return nil
}

// Factory makes a provider from its settings.
type Factory func(settings map[string]string) (Provider, error)

// Driver is a provider's registration record: everything nodemgr knows of
// a provider without making one. Drivers register it from init; the rest
// of nodemgr asks Lookup and Names instead of naming providers.
type Driver struct {
	// Name is the provider's name in templates, pools and the API.
	Name string
	// Order places it in lists people read (help, errors, the
	// dashboard): lower first.
	Order int
	// New makes the provider from its settings.
	New Factory
	// ExtraKeys are the Extra keys it reads beyond the template fields
	// (name, image, user, cpu, memoryMB, diskMB); a template's or
	// mapping's block for this provider may set only these, so a misspelt
	// key is an error rather than ignored. Empty when it reads none; nil
	// only in a test's stand-in that has not said, whose blocks are then
	// not checked.
	ExtraKeys []string
	// OnHost says its machines run on the server's own host (the host
	// itself, or containers on this machine's engine), so they have the
	// server's architecture and rank as local; a provider that knows
	// better for each instance says so through Locality and Archer.
	OnHost bool
	// HostNetwork, when set, says whether a machine made from extra
	// shares the server host's network, and so reaches a server that
	// listens on loopback; nil means never.
	HostNetwork func(extra map[string]any) bool
}

var drivers = registry.New(func(d Driver) (string, int) { return d.Name, d.Order })

// Register makes a provider available by name; drivers call it from init.
// A record without a name or constructor, or a name registered twice, is a
// programming error and panics.
func Register(d Driver) {
	if d.New == nil {
		panic("provision: provider " + d.Name + " registered without New")
	}
	add(d)
}

// Describe makes a provider's record known without its code: a build
// that checks templates and mappings against it but makes no machine
// (the client build, internal/drivers/records). New of it fails.
func Describe(d Driver) {
	d.New = nil
	add(d)
}

func add(d Driver) {
	if d.Name == "" {
		panic("provision: provider registered without a name")
	}
	if !drivers.Add(d, nil) {
		panic("provision: provider registered twice: " + d.Name)
	}
}

// Lookup returns the record of the named provider, or an ErrInvalid for
// field that lists the providers nodemgr has.
func Lookup(field, name string) (Driver, error) {
	d, ok := drivers.Get(name)
	if !ok {
		return Driver{}, errdefs.Field(field, "unknown provider %q; known: %v", name, Names())
	}
	return d, nil
}

// New makes the named provider.
func New(name string, settings map[string]string) (Provider, error) {
	d, err := Lookup("provider", name)
	if err != nil {
		return nil, err
	}
	if d.New == nil {
		return nil, fmt.Errorf("provider %s is not in this build of nodemgr (the client build, which only describes it): the server makes machines", name)
	}
	return d.New(settings)
}

// Names lists the registered providers in their Order.
func Names() []string { return drivers.Names() }
