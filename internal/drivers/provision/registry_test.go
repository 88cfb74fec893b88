package provision_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	_ "github.com/nodemgr/nodemgr/internal/drivers/all"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// An unknown provider is refused for the field it came from, with the
// providers nodemgr has, in the order people read them.
func TestLookupUnknown(t *testing.T) {
	for _, tc := range []struct{ field, name string }{
		{"provider", "kubernetes"},
		{"candidates[1].provider", ""},
		{"provider", "Docker"},
	} {
		t.Run(tc.field+"="+tc.name, func(t *testing.T) {
			_, err := provision.Lookup(tc.field, tc.name)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Lookup(%q, %q) = %v, want an invalid-field error on %s", tc.field, tc.name, err, tc.field)
			}
			if want := `unknown provider "` + tc.name + `"; known: [local docker libvirt aws]`; fe.Reason != want {
				t.Errorf("Lookup(%q, %q) says %q, want %q", tc.field, tc.name, fe.Reason, want)
			}
		})
	}
	if _, err := provision.New("gce", nil); err == nil || !strings.Contains(err.Error(), "provider: unknown provider \"gce\"") {
		t.Errorf(`New("gce") = %v, want the unknown-provider error`, err)
	}
}

// Every driver linked in has a whole record: a name it is found by, a
// constructor, the Extra keys it reads (empty, not unsaid, when none), and
// an order of its own.
func TestEveryDriverHasItsRecord(t *testing.T) {
	names := provision.Names()
	if want := []string{"local", "docker", "libvirt", "aws"}; !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v", names, want)
	}
	orders := map[int]string{}
	for _, name := range names {
		d, err := provision.Lookup("provider", name)
		if err != nil {
			t.Fatalf("Lookup(%q) = %v", name, err)
		}
		if d.Name != name {
			t.Errorf("Lookup(%q).Name = %q", name, d.Name)
		}
		if d.New == nil {
			t.Errorf("%s: New is nil", name)
		}
		if d.ExtraKeys == nil {
			t.Errorf("%s: ExtraKeys is nil; a driver says which keys it reads (an empty list for none)", name)
		}
		if d.Order <= 0 {
			t.Errorf("%s: Order = %d, want a place in lists", name, d.Order)
		}
		if other, dup := orders[d.Order]; dup {
			t.Errorf("%s and %s share Order %d", name, other, d.Order)
		}
		orders[d.Order] = name
		if d.OnHost && d.HostNetwork == nil {
			t.Errorf("%s: OnHost without HostNetwork: say when its machines share the host's network", name)
		}
	}
}

// The records say which providers' machines are the server host's, and
// which of those share its network.
func TestDriverCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name        string
		onHost      bool
		extra       map[string]any
		hostNetwork bool
	}{
		{"local", true, nil, true},
		{"docker", true, nil, false},
		{"docker", true, map[string]any{"network_mode": "host"}, true},
		{"docker", true, map[string]any{"network_mode": "bridge"}, false},
		{"libvirt", false, nil, false},
		{"aws", false, nil, false},
	} {
		d, err := provision.Lookup("provider", tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if d.OnHost != tc.onHost {
			t.Errorf("%s: OnHost = %v, want %v", tc.name, d.OnHost, tc.onHost)
		}
		if got := d.HostNetwork != nil && d.HostNetwork(tc.extra); got != tc.hostNetwork {
			t.Errorf("%s: HostNetwork(%v) = %v, want %v", tc.name, tc.extra, got, tc.hostNetwork)
		}
	}
}
