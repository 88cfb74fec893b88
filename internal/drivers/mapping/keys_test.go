package mapping

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// A provider block may name only the keys its provider's record lists (and
// the template fields); the all block, and providers whose record does
// not say, are open. The stand-in docker lists network_mode and env
// (drivers_test.go).
func TestOverrideKeysAreTheProvidersOwn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overrides map[string]map[string]any
		field     string // "" when valid
		hint      string
	}{
		{"a declared key", map[string]map[string]any{"docker": {"network_mode": "host"}}, "", ""},
		{"a template field", map[string]map[string]any{"docker": {"image": "x", "memoryMB": 64}}, "", ""},
		{"anything under all", map[string]map[string]any{"all": {"netwrok_mode": "host", "shell": "bash"}}, "", ""},
		{"a provider that declared nothing", map[string]map[string]any{"libvirt": {"machine": "q35"}}, "", ""},
		{"a typo", map[string]map[string]any{"docker": {"netwrok_mode": "host"}}, "overrides.docker.netwrok_mode", "did you mean network_mode?"},
		{"an unknown key", map[string]map[string]any{"docker": {"volumes": []any{"/x"}}}, "overrides.docker.volumes", "it reads "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateOverrides("overrides", tc.overrides)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("ValidateOverrides(%v) = %v, want nil", tc.overrides, err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.hint) {
				t.Fatalf("ValidateOverrides(%v) = %v, want a field error on %s saying %q", tc.overrides, err, tc.field, tc.hint)
			}
		})
	}
}
