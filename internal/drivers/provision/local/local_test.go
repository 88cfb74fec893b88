package local_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/local"
)

func TestProvision(t *testing.T) {
	p, err := provision.New("local", nil)
	if err != nil {
		t.Fatalf(`provision.New("local") = %v`, err)
	}
	ctx := context.Background()
	spec := provision.Spec{Name: "dev", Template: "t", Extra: map[string]any{"image": "ignored"}, Labels: map[string]string{"a": "b"}}
	d, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	host, _ := os.Hostname()
	if d.Provider != "local" || d.ResourceID != host || d.Name != "dev" || d.Template != "t" || d.State != provision.StateRunning || d.Labels["a"] != "b" {
		t.Errorf("Provision = %+v, want the host %s, running", d, host)
	}
	if want := []string{"exec:local", "copy:local"}; !slices.Equal(d.Executors, want) {
		t.Errorf("Executors = %v, want %v", d.Executors, want)
	}
	if w, _ := d.Extra["warning"].(string); !strings.Contains(w, "insecure") {
		t.Errorf(`Extra["warning"] = %q, want it to say insecure`, w)
	}
	if _, ok := spec.Extra["warning"]; ok {
		t.Errorf("Provision changed the spec's Extra")
	}
	if err := p.Destroy(ctx, d); err != nil {
		t.Errorf("Destroy = %v", err)
	}
	if err := p.Destroy(ctx, d); err != nil {
		t.Errorf("Destroy again = %v", err)
	}
}

// The local provider has no lifecycle: every verb is refused up front.
func TestNoLifecycle(t *testing.T) {
	p, _ := local.New(nil)
	if _, ok := any(p).(provision.Lifecycle); ok {
		t.Fatalf("local provider claims a lifecycle")
	}
	d, _ := p.Provision(context.Background(), provision.Spec{Name: "dev"})
	for _, verb := range provision.Verbs {
		err := provision.Do(context.Background(), p, verb, d)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no lifecycle") {
			t.Errorf("Do(%s) = %v, want it refused: no lifecycle", verb, err)
		}
	}
}

func TestNewRefusesSettings(t *testing.T) {
	if _, err := local.New(map[string]string{"host": "x"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("New(host) = %v, want invalid", err)
	}
}
