package orchestrate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Pool reads a pool's spec and the document that holds it.
func (o *Orchestrator) Pool(ctx context.Context, name string) (api.PoolSpec, store.Document, error) {
	d, err := o.store.GetDocument(ctx, store.KindPool, name)
	if errdefs.IsNotFound(err) {
		return api.PoolSpec{}, d, errdefs.NotFound("pool %q (see nodemgr pool ls)", name)
	}
	if err != nil {
		return api.PoolSpec{}, d, err
	}
	spec, err := DecodeSpec(d.Body)
	return spec, d, err
}

// Apply creates or replaces a pool, once its spec is normalized and each
// candidate's provider and template are known and its machines could
// reach the server; by is who asked, for the pool's events. The caller
// wakes the orchestrator, wherever it runs.
func (o *Orchestrator) Apply(ctx context.Context, spec api.PoolSpec, by string) (api.PoolSpec, store.Document, error) {
	spec, err := Normalize(spec)
	if err != nil {
		return spec, store.Document{}, err
	}
	for i, c := range Candidates(spec) {
		if err := o.checkCandidate(ctx, spec, i, c); err != nil {
			return spec, store.Document{}, err
		}
	}
	doc, err := o.putPool(ctx, spec)
	if err != nil {
		return spec, doc, err
	}
	verb := "updated"
	if doc.Version == 1 {
		verb = "created"
	}
	o.Record(ctx, spec.Name, "applied", fmt.Sprintf("pool %s %s (version %d) by %s", spec.Name, verb, doc.Version, by))
	return spec, doc, nil
}

// Patch changes only the fields of a pool's spec that p has (min, max,
// paused, priority): scale, pause and resume without the pool's file.
func (o *Orchestrator) Patch(ctx context.Context, name string, p api.PoolPatch, by string) (api.PoolSpec, store.Document, error) {
	spec, _, err := o.Pool(ctx, name)
	if err != nil {
		return spec, store.Document{}, err
	}
	var changes []string
	if p.Min != nil {
		spec.Min = *p.Min
		changes = append(changes, fmt.Sprintf("min %d", spec.Min))
	}
	if p.Max != nil {
		spec.Max = *p.Max
		changes = append(changes, fmt.Sprintf("max %d", spec.Max))
	}
	if p.Paused != nil {
		spec.Paused = *p.Paused
		changes = append(changes, map[bool]string{true: "paused", false: "resumed"}[spec.Paused])
	}
	if p.Priority != nil {
		spec.Priority = *p.Priority
		changes = append(changes, fmt.Sprintf("priority %d", spec.Priority))
	}
	if len(changes) == 0 {
		return spec, store.Document{}, fmt.Errorf("nothing to change: give min, max, paused or priority: %w", errdefs.ErrInvalid)
	}
	if p.Max != nil && p.Min == nil && spec.Min > spec.Max {
		// Name the field the caller gave, not the one Normalize would.
		return spec, store.Document{}, errdefs.Field("max", "must be at least the pool's min (%d), got %d; lower min too", spec.Min, spec.Max)
	}
	if spec, err = Normalize(spec); err != nil {
		return spec, store.Document{}, err
	}
	doc, err := o.putPool(ctx, spec)
	if err != nil {
		return spec, doc, err
	}
	o.Record(ctx, spec.Name, "applied", fmt.Sprintf("pool %s changed (version %d) by %s: %s", spec.Name, doc.Version, by, strings.Join(changes, ", ")))
	return spec, doc, nil
}

func (o *Orchestrator) putPool(ctx context.Context, spec api.PoolSpec) (store.Document, error) {
	body, _ := json.Marshal(spec)
	doc, err := o.store.PutDocument(ctx, store.Document{Kind: store.KindPool, Name: spec.Name, Body: body})
	if err != nil {
		return doc, fmt.Errorf("store pool %s: %w", spec.Name, err)
	}
	return doc, nil
}

// checkCandidate refuses a candidate whose provider or template does not
// exist, or whose machines could not reach the server.
func (o *Orchestrator) checkCandidate(ctx context.Context, spec api.PoolSpec, i int, c api.PoolCandidate) error {
	field := func(f string) string {
		if len(spec.Candidates) == 0 {
			return f
		}
		return fmt.Sprintf("candidates[%d].%s", i, f)
	}
	if _, err := o.cluster.Provider(c.Provider); err != nil {
		return errdefs.Field(field("provider"), "%s", errdefs.Message(err))
	}
	extra, err := o.cluster.Render(ctx, c.Template, c.Provider)
	if err != nil {
		return errdefs.Field(field("template"), "%s", errdefs.Message(err))
	}
	o.mu.Lock()
	serverURL := o.cfg.Bootstrap.ServerURL
	o.mu.Unlock()
	if why := unreachable(serverURL, c.Provider, extra); why != "" {
		return errdefs.Field(field("template"), "%s", why)
	}
	return nil
}

// unreachable says why a machine could not reach the server at url: a
// server on loopback is reachable only from machines that share the
// host's network.
func unreachable(serverURL, provider string, extra map[string]any) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return ""
	}
	ip := net.ParseIP(u.Hostname())
	if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ""
	}
	if d, err := provision.Lookup("provider", provider); err == nil && d.HostNetwork != nil && d.HostNetwork(extra) {
		return ""
	}
	return fmt.Sprintf("its %s machines could not reach the server at %s (loopback): run the server with --agent-server-url set to an address they reach "+
		"(and --listen on it), or give the template overrides: {docker: {network_mode: host}}", provider, serverURL)
}
