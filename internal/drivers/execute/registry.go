package execute

import (
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/registry"
)

// Driver is an executor's registration record: everything nodemgr knows
// of an executor without making one. Drivers register it from init; the
// server makes executors through it (Lookup, ByCapability) rather than
// naming them.
type Driver struct {
	// Name is the executor's name in the API (via) and the CLI (--via).
	Name string
	// Capability is what a deployment carries for it (exec:ssh): exec:
	// for one that runs commands first, copy: for one that copies first.
	Capability string
	// Order places it in lists people read (help, errors): lower first.
	Order int
	// New makes the executor; the server makes each once and keeps it.
	// It must contact no machine: the server makes one to check settings
	// before it starts.
	New func(env Env) (Executor, error)
	// Settings are the keys its block of the executor settings takes,
	// for messages; empty when it takes none.
	Settings []string
	// SettingsOf names the executor whose settings it takes, when it
	// goes through that one's connections (sftp and rsync over ssh's).
	SettingsOf string
	// OnHost says its machines are on the server's own host (the host
	// itself, or containers on this machine's engine), so that a copy to
	// them crosses no network and is not worth compressing.
	OnHost bool
}

// Env is what an executor is made with.
type Env struct {
	// Settings are its block of the executor settings.
	Settings map[string]string
	// Providers are the provider settings, for an executor that reaches
	// machines as their provider made them (docker's engine host).
	Providers map[string]map[string]string
	// Executor returns another executor by name, made once and shared;
	// nil when there is none to share (a settings check).
	Executor func(name string) (Executor, error)
}

var drivers = registry.New(func(d Driver) (string, int) { return d.Name, d.Order })

// Register makes an executor available by name; drivers call it from
// init. A record without a name, capability or constructor, or a name or
// capability registered twice, is a programming error and panics.
func Register(d Driver) {
	if d.New == nil {
		panic("execute: executor " + d.Name + " registered without New")
	}
	add(d)
}

// Describe makes an executor's record known without its code, for a
// build that names executors but runs no command (the client build,
// internal/drivers/records). Its New is nil: nothing in that build makes
// one.
func Describe(d Driver) {
	d.New = nil
	add(d)
}

func add(d Driver) {
	switch {
	case d.Name == "":
		panic("execute: executor registered without a name")
	case d.Capability == "":
		panic("execute: executor " + d.Name + " registered without a capability")
	}
	d.Settings = slices.Clone(d.Settings)
	if !drivers.Add(d, func(o Driver) bool { return o.Capability == d.Capability }) {
		panic("execute: executor registered twice: " + d.Name + " (" + d.Capability + ")")
	}
}

// Lookup returns the record of the named executor, or an ErrInvalid for
// field that lists the executors nodemgr has.
func Lookup(field, name string) (Driver, error) {
	d, ok := drivers.Get(name)
	if !ok {
		return Driver{}, errdefs.Field(field, "no executor %q; nodemgr has %s", name, strings.Join(Names(), ", "))
	}
	return d, nil
}

// ByCapability returns the record of the executor that takes capability.
func ByCapability(capability string) (Driver, bool) {
	return drivers.Find(func(d Driver) bool { return d.Capability == capability })
}

// Drivers lists the registered executors' records in their Order.
func Drivers() []Driver { return drivers.All() }

// Names lists the registered executors in their Order.
func Names() []string { return drivers.Names() }
