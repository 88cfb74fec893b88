package orchestrate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Defaults of a pool spec (the and DESIGN.md's).
const (
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultBootstrapTimeout = 3 * time.Minute
	DefaultMaxLaunching     = 4
	DefaultMinAge           = time.Minute
	// maxPoolMachines bounds max: a typo of 10000 must not make 10000 machines.
	maxPoolMachines = 1000
)

// Normalize validates a pool spec and fills in its defaults. Every error
// names its field.
func Normalize(spec api.PoolSpec) (api.PoolSpec, error) {
	if err := validate.Name("name", spec.Name); err != nil {
		return spec, err
	}
	switch {
	case len(spec.Candidates) > 0 && (spec.Template != "" || spec.Provider != ""):
		return spec, errdefs.Field("candidates", "give either template and provider, or candidates, not both")
	case len(spec.Candidates) == 0 && spec.Template == "":
		return spec, errdefs.Field("template", "required (or candidates: a list of template/provider pairs); see nodemgr template ls")
	case len(spec.Candidates) == 0 && spec.Provider == "":
		return spec, errdefs.Field("provider", "required with template (%s)", strings.Join(provision.Names(), ", "))
	}
	seen := map[[2]string]bool{}
	for i, c := range Candidates(spec) {
		field := fmt.Sprintf("candidates[%d]", i)
		if len(spec.Candidates) == 0 {
			field = ""
		}
		if c.Template == "" {
			return spec, errdefs.Field(join(field, "template"), "required")
		}
		if c.Provider == "" {
			return spec, errdefs.Field(join(field, "provider"), "required")
		}
		if c.Price != nil && !(*c.Price >= 0) {
			return spec, errdefs.Field(join(field, "price"), "must be 0 (free) or more, got %g; leave it out when unknown", *c.Price)
		}
		key := [2]string{c.Template, c.Provider}
		if seen[key] {
			return spec, errdefs.Field(field, "template %s on provider %s is listed twice", c.Template, c.Provider)
		}
		seen[key] = true
	}
	if spec.Policy == "" {
		spec.Policy = schedule.Cheapest
	}
	if !slices.Contains(schedule.Policies, spec.Policy) {
		return spec, errdefs.Field("policy", "unknown policy %q; use one of %v", spec.Policy, schedule.Policies)
	}
	if err := validate.Groups("groups", spec.Groups); err != nil {
		return spec, err
	}
	if spec.Min < 0 {
		return spec, errdefs.Field("min", "must be 0 or more, got %d", spec.Min)
	}
	if spec.Max < 1 || spec.Max > maxPoolMachines {
		return spec, errdefs.Field("max", "must be between 1 and %d, got %d", maxPoolMachines, spec.Max)
	}
	if spec.Min > spec.Max {
		return spec, errdefs.Field("min", "must be at most max (%d), got %d", spec.Max, spec.Min)
	}
	if spec.MaxCPUs < 0 {
		return spec, errdefs.Field("max_cpus", "must be 0 (no cap) or more, got %g", spec.MaxCPUs)
	}
	if spec.MaxMemoryMB < 0 {
		return spec, errdefs.Field("max_memory_mb", "must be 0 (no cap) or more, got %d", spec.MaxMemoryMB)
	}
	durations := []struct {
		field string
		d     *api.Duration
		def   time.Duration
	}{
		{"idle_timeout", &spec.IdleTimeout, DefaultIdleTimeout},
		{"bootstrap_timeout", &spec.BootstrapTimeout, DefaultBootstrapTimeout},
		{"min_age", &spec.MinAge, DefaultMinAge},
	}
	for _, d := range durations {
		if *d.d < 0 {
			return spec, errdefs.Field(d.field, "must be positive, got %s", time.Duration(*d.d))
		}
		if *d.d == 0 {
			*d.d = api.Duration(d.def)
		}
	}
	if spec.MinAge > spec.IdleTimeout {
		spec.MinAge = spec.IdleTimeout
	}
	if spec.MaxLaunching < 0 {
		return spec, errdefs.Field("max_launching", "must be 1 or more, got %d", spec.MaxLaunching)
	}
	if spec.MaxLaunching == 0 {
		spec.MaxLaunching = DefaultMaxLaunching
	}
	for i, tag := range spec.Tags {
		if tag == "" {
			return spec, errdefs.Field(fmt.Sprintf("tags[%d]", i), "must not be empty")
		}
	}
	return spec, nil
}

// Candidates lists the template/provider pairs a pool makes machines from:
// its one template and provider, or its candidates.
func Candidates(spec api.PoolSpec) []api.PoolCandidate {
	if len(spec.Candidates) > 0 {
		return spec.Candidates
	}
	return []api.PoolCandidate{{Template: spec.Template, Provider: spec.Provider}}
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}
