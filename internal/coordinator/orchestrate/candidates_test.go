package orchestrate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
)

// candidateCluster is a recordingCluster with named providers and
// templates rendered to fixed Extras.
type candidateCluster struct {
	recordingCluster
	providers map[string]provision.Provider
	extras    map[string]map[string]any // by template
}

func (c *candidateCluster) Provider(name string) (provision.Provider, error) {
	if p, ok := c.providers[name]; ok {
		return p, nil
	}
	return nil, errdefs.NotFound("provider %s", name)
}

func (c *candidateCluster) Render(_ context.Context, template, _ string) (map[string]any, error) {
	return c.extras[template], nil
}

// namedProvider is a provider with a name and no capabilities.
type namedProvider struct {
	recordingProvider
	name string
}

func (p namedProvider) Name() string { return p.name }

// explainPool stores one pool of the given candidates and explains req.
func explainPool(t *testing.T, cl *candidateCluster, cands []api.PoolCandidate, req schedule.Request) []string {
	t.Helper()
	ctx := t.Context()
	st := openStore(t)
	body, _ := json.Marshal(api.PoolSpec{Name: "p", Max: 4, Candidates: cands})
	if _, err := st.PutDocument(ctx, store.Document{Kind: store.KindPool, Name: "p", Body: body}); err != nil {
		t.Fatal(err)
	}
	o := New(Config{}, st, cl, slog.New(slog.DiscardHandler))
	vs, err := o.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		if v.Feasible {
			out = append(out, fmt.Sprintf("%d %s: %s", v.Rank, v.Template, v.Why))
		} else {
			out = append(out, fmt.Sprintf("- %s: %s", v.Template, strings.Join(v.Reasons, "; ")))
		}
	}
	return out
}

func libvirtAt(t *testing.T, uri string) provision.Provider {
	t.Helper()
	p, err := libvirt.New(map[string]string{"uri": uri})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExplainRefusesTheWrongArch: a candidate's arch is what its
// provider makes of the template (libvirt's extra.arch, else the
// server's; docker's is the server's), not unknown, so a request for
// another arch finds it infeasible.
func TestExplainRefusesTheWrongArch(t *testing.T) {
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Skipf("no other arch to ask for on %s", runtime.GOARCH)
	}
	cl := &candidateCluster{
		providers: map[string]provision.Provider{"libvirt": libvirtAt(t, "qemu:///system"), "docker": namedProvider{name: "docker"}},
		extras: map[string]map[string]any{
			"vm-x86": {"arch": "x86_64"}, "vm-arm": {"arch": "aarch64"}, "vm-host": {}, "box": {},
		},
	}
	cands := []api.PoolCandidate{
		{Template: "vm-x86", Provider: "libvirt"}, {Template: "vm-arm", Provider: "libvirt"},
		{Template: "vm-host", Provider: "libvirt"}, {Template: "box", Provider: "docker"},
	}
	got := explainPool(t, cl, cands, schedule.Request{Arch: other})
	feasible := map[string]string{"arm64": "vm-arm", "amd64": "vm-x86"}[other]
	if len(got) != 4 || !strings.HasPrefix(got[0], "1 "+feasible+":") {
		t.Fatalf("Explain(arch %s) = %q, want only %s feasible", other, got, feasible)
	}
	for _, line := range got[1:] {
		if !strings.HasPrefix(line, "- ") || !strings.Contains(line, "want "+other) {
			t.Errorf("Explain(arch %s): %q, want it infeasible for its arch", other, line)
		}
	}
}

// TestExplainPreferLocalLibvirt: a libvirt daemon on a URI without a
// remote host is local, and prefer-local ranks it before a cheaper remote
// one.
func TestExplainPreferLocalLibvirt(t *testing.T) {
	cl := &candidateCluster{
		providers: map[string]provision.Provider{
			"libvirt":        libvirtAt(t, "qemu:///system"),
			"libvirt-remote": libvirtAt(t, "qemu+ssh://root@kvm1.example.com/system"),
		},
		extras: map[string]map[string]any{"vm": {"cpu": 2, "memoryMB": 2048}},
	}
	cands := []api.PoolCandidate{
		{Template: "vm", Provider: "libvirt-remote", Price: ptr(0.01)},
		{Template: "vm", Provider: "libvirt", Price: ptr(1.0)},
	}
	got := explainPool(t, cl, cands, schedule.Request{Policy: schedule.PreferLocal})
	want := []string{"1 vm: prefer-local: local, $1.00/h", "2 vm: prefer-local: remote, $0.01/h"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Explain(prefer-local) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
