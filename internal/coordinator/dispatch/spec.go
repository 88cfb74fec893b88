package dispatch

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// Limits of a suite's worker schedule.
const (
	minWorkers      = 1
	maxWorkers      = 256
	maxCoreIndex    = 4095
	defaultPrefetch = 32
	maxPrefetch     = 4096
	maxArgvBytes    = 128 << 10
)

// MaxTasksPerCall bounds the tasks of one submission.
const MaxTasksPerCall = 10000

// ValidateSuite checks a suite spec and fills defaults. Errors name the field.
func ValidateSuite(s *api.SuiteSpec) error {
	if err := validate.Name("name", s.Name); err != nil {
		return err
	}
	if len(s.Description) > 4096 {
		return errdefs.Field("description", "at most 4096 bytes")
	}
	if s.Group != "" {
		if err := validate.Group("group", s.Group); err != nil {
			return err
		}
	}
	if err := validate.Tags("tags", s.Tags); err != nil {
		return err
	}
	if err := validate.Labels("labels", s.Labels); err != nil {
		return err
	}
	if s.Priority < -1000 || s.Priority > 1000 {
		return errdefs.Field("priority", "must be between -1000 and 1000, got %d", s.Priority)
	}
	ws := &s.WorkerSchedule
	// 0 (or no worker_schedule at all) is one worker per CPU of the node
	// that takes the suite up, decided there.
	if ws.WorkerCount != 0 && (ws.WorkerCount < minWorkers || ws.WorkerCount > maxWorkers) {
		return errdefs.Field("worker_schedule.worker_count", "must be between %d and %d, or 0 for one per CPU of the node, got %d", minWorkers, maxWorkers, ws.WorkerCount)
	}
	if ws.TaskPrefetchCount == nil {
		n := defaultPrefetch
		ws.TaskPrefetchCount = &n
	}
	if p := *ws.TaskPrefetchCount; p < 0 || p > maxPrefetch {
		return errdefs.Field("worker_schedule.task_prefetch_count", "must be between 0 and %d, got %d", maxPrefetch, p)
	}
	if b := ws.CPUBinding; b != nil {
		if err := validateBinding(b, ws.WorkerCount); err != nil {
			return err
		}
	}
	for i, a := range ws.WorkerCommand {
		if a == "" && i == 0 {
			return errdefs.Field("worker_schedule.worker_command[0]", "the program must not be empty")
		}
	}
	if err := workload.CheckUser("run_as", s.RunAs); err != nil {
		return err
	}
	if err := validateHook("hooks.prepare", s.Hooks.Prepare); err != nil {
		return err
	}
	if err := validateRetry("retry", s.Retry); err != nil {
		return err
	}
	return validateHook("hooks.cleanup", s.Hooks.Cleanup)
}

// validateRetry checks a retry policy (nil is the default one).
func validateRetry(field string, p *api.RetryPolicy) error {
	if p == nil {
		return nil
	}
	if p.MaxAttempts < 0 || p.MaxAttempts > 100 {
		return errdefs.Field(field+".max_attempts", "must be between 1 and 100, or 0 for the default rules, got %d", p.MaxAttempts)
	}
	for i, c := range p.FinalExitCodes {
		if c < 1 || c > 255 {
			return errdefs.Field(fmt.Sprintf("%s.final_exit_codes[%d]", field, i), "must be an exit code between 1 and 255, got %d", c)
		}
	}
	if p.Backoff < 0 || time.Duration(p.Backoff) > time.Hour {
		return errdefs.Field(field+".backoff", "must be between 0 (the server's default) and 1h, got %v", time.Duration(p.Backoff))
	}
	return nil
}

func validateBinding(b *api.CPUBinding, workers int) error {
	switch b.Strategy {
	case "":
		b.Strategy = api.BindRoundRobin
	case api.BindRoundRobin, api.BindExclusive, api.BindShared:
	default:
		return errdefs.Field("worker_schedule.cpu_binding.strategy", "must be RoundRobin, Exclusive or Shared, got %q", b.Strategy)
	}
	if len(b.Cores) == 0 {
		return errdefs.Field("worker_schedule.cpu_binding.cores", "list the cores to bind to, e.g. [0, 1, 2, 3]")
	}
	seen := map[int]bool{}
	for i, c := range b.Cores {
		field := fmt.Sprintf("worker_schedule.cpu_binding.cores[%d]", i)
		if c < 0 || c > maxCoreIndex {
			return errdefs.Field(field, "core %d is out of range 0-%d", c, maxCoreIndex)
		}
		if seen[c] {
			return errdefs.Field(field, "core %d is listed twice", c)
		}
		seen[c] = true
	}
	if b.Strategy == api.BindExclusive && len(b.Cores) < workers {
		return errdefs.Field("worker_schedule.cpu_binding.cores", "Exclusive binding needs at least one core per worker: %d cores for %d workers", len(b.Cores), workers)
	}
	return nil
}

// ValidateCoresOn checks a binding against a node's core count.
func ValidateCoresOn(b *api.CPUBinding, node string, cores int) error {
	if b == nil || cores <= 0 {
		return nil
	}
	for i, c := range b.Cores {
		if c >= cores {
			return errdefs.Field(fmt.Sprintf("worker_schedule.cpu_binding.cores[%d]", i), "node %s has cores 0-%d; core %d does not exist there", node, cores-1, c)
		}
	}
	return nil
}

func validateHook(field string, h *api.Hook) error {
	if h == nil {
		return nil
	}
	if len(h.Command) == 0 || h.Command[0] == "" {
		return errdefs.Field(field+".command", "a hook needs a command")
	}
	if h.Timeout < 0 {
		return errdefs.Field(field+".timeout", "must not be negative")
	}
	for k := range h.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errdefs.Field(field+".env", "bad variable name %q", k)
		}
	}
	for i, r := range h.Resources {
		f := fmt.Sprintf("%s.resources[%d]", field, i)
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errdefs.Field(f+".url", "must be an http:// or https:// URL, got %q", r.URL)
		}
		if r.Path == "" || path.IsAbs(r.Path) || slices.Contains(strings.Split(path.Clean(r.Path), "/"), "..") {
			return errdefs.Field(f+".path", "must be a relative path inside the suite's work dir, got %q", r.Path)
		}
	}
	return nil
}

// ValidateTask checks one task spec.
func ValidateTask(field string, t api.TaskSpec) error {
	if len(t.Argv) == 0 || t.Argv[0] == "" {
		return errdefs.Field(field+".argv", "a task needs a command: argv must not be empty")
	}
	size := 0
	for _, a := range t.Argv {
		size += len(a)
	}
	if size > maxArgvBytes {
		return errdefs.Field(field+".argv", "at most %d bytes, got %d", maxArgvBytes, size)
	}
	for k := range t.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errdefs.Field(field+".env", "bad variable name %q", k)
		}
	}
	if t.Timeout < 0 || time.Duration(t.Timeout) > 7*24*time.Hour {
		return errdefs.Field(field+".timeout", "must be between 0 (none) and 168h")
	}
	if t.KillGrace < 0 || time.Duration(t.KillGrace) > api.MaxKillGrace {
		return errdefs.Field(field+".kill_grace", "must be between 0 (the default, %v) and %v, got %v",
			api.DefaultKillGrace, api.MaxKillGrace, time.Duration(t.KillGrace))
	}
	if t.Priority < -1000 || t.Priority > 1000 {
		return errdefs.Field(field+".priority", "must be between -1000 and 1000, got %d", t.Priority)
	}
	if t.Name != "" {
		if err := validate.Name(field+".name", t.Name); err != nil {
			return err
		}
	}
	if err := validate.Labels(field+".labels", t.Labels); err != nil {
		return err
	}
	if err := validateRetry(field+".retry", t.Retry); err != nil {
		return err
	}
	return validateTaskFiles(field, t)
}
