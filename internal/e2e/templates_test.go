package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The seed's files, verbatim.
const (
	seedTemplate = "../coordinator/template/testdata/ubuntu-worker-small.yaml"
	seedMapping  = "../coordinator/template/testdata/ubuntu-worker-small.mapping.yaml"
)

func TestTemplatesAndMappingsFromTheSeed(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	for _, args := range [][]string{
		{"template", "validate", seedTemplate},
		{"mapping", "validate", seedMapping},
		{"template", "apply", "-f", seedTemplate},
		{"mapping", "apply", "-f", seedMapping, "--name", "ubuntu"},
	} {
		if out, errOut, code := s.run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, out, errOut)
		}
	}
	want := map[string]map[string]any{
		"docker":  {"image": "ubuntu:24.04", "user": "ubuntu", "cpu": 2.0, "memoryMB": 256.0, "env": []any{"FOO=bar"}},
		"libvirt": {"iso": "ubuntu-24.04.3-live-server-amd64.iso", "image_type": "iso", "memoryMB": 1024.0, "diskGB": 3.0, "network": "default"},
		"aws":     {"ami": "ami-0a116fa7c861dd5f9", "image_type": "ami", "user": "ubuntu", "memoryMB": 256.0},
	}
	for provider, keys := range want {
		r, err := s.client().Render(ctx, "ubuntu-worker-small", provider)
		if err != nil {
			t.Fatalf("render %s: %v", provider, err)
		}
		for k, v := range keys {
			got, _ := json.Marshal(r.Extra[k])
			exp, _ := json.Marshal(v)
			if string(got) != string(exp) {
				t.Errorf("render --provider %s: %s = %s, want %s", provider, k, got, exp)
			}
		}
		if len(r.Mappings) != 1 || len(r.Steps) == 0 {
			t.Errorf("render %s: mappings %v, %d steps; want the ubuntu set and an explanation", provider, r.Mappings, len(r.Steps))
		}
	}
	if _, ok := mustRender(t, s, "docker")["iso"]; ok {
		t.Error("docker render carries libvirt's iso")
	}
	out, _, code := s.run(t, "template", "render", "ubuntu-worker-small", "--provider", "aws", "--explain")
	if code != 0 || !strings.Contains(out, "ami-0a116fa7c861dd5f9") || !strings.Contains(out, "mapping[0]") {
		t.Errorf("render --explain (exit %d):\n%s", code, out)
	}
	out, _, _ = s.run(t, "template", "ls")
	if !strings.Contains(out, "ubuntu-worker-small") || !strings.Contains(out, "docker,libvirt") {
		t.Errorf("template ls:\n%s", out)
	}
	out, _, _ = s.run(t, "template", "show", "ubuntu-worker-small")
	if b, _ := os.ReadFile(seedTemplate); !strings.Contains(out, string(b)) {
		t.Errorf("template show does not give back the file as written:\n%s", out)
	}

	// Bad files: line, column and field, and nothing stored.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: broken\ncpu: -2\nimage: x\n"), 0o600)
	_, errOut, code := s.run(t, "template", "validate", bad)
	if code == 0 || !strings.Contains(errOut, "bad.yaml:2:") || !strings.Contains(errOut, "cpu") {
		t.Errorf("validate of a negative cpu: exit %d, %q; want FILE:2:COL and the field", code, errOut)
	}
	_, errOut, code = s.run(t, "template", "apply", "-f", bad)
	if code == 0 {
		t.Errorf("apply of a bad template exited 0: %s", errOut)
	}
	// A key the docker provider does not read is a typo, not ignored.
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("name: typo\nimage: x\noverrides:\n  docker:\n    netwrok_mode: host\n"), 0o600)
	_, errOut, code = s.run(t, "template", "validate", typo)
	if code == 0 || !strings.Contains(errOut, "overrides.docker.netwrok_mode") || !strings.Contains(errOut, "did you mean network_mode") {
		t.Errorf("validate of overrides.docker.netwrok_mode: exit %d, %q; want the field and a suggestion", code, errOut)
	}
	if _, errOut, code = s.run(t, "template", "apply", "-f", typo); code == 0 {
		t.Errorf("apply of a template with an unknown docker key exited 0: %s", errOut)
	}
	loop := filepath.Join(dir, "loop.yaml")
	os.WriteFile(loop, []byte(`mapping:
  - match: {image: a}
    overrides: {all: {image: b}}
  - match: {image: b}
    overrides: {all: {image: a}}
`), 0o600)
	_, errOut, code = s.run(t, "mapping", "apply", "-f", loop)
	if code == 0 || !strings.Contains(errOut, "mapping[0]") || !strings.Contains(errOut, "mapping[1]") {
		t.Errorf("mapping apply of a loop: exit %d, %q; want both rules named", code, errOut)
	}
	if _, errOut, code = s.run(t, "template", "render", "ubuntu-worker-small", "--provider", "vmware"); code == 0 || !strings.Contains(errOut, "provider") {
		t.Errorf("render for an unknown provider: exit %d, %q", code, errOut)
	}
	docs, _ := s.client().Documents(ctx, "mappings")
	if len(docs) != 1 {
		t.Errorf("%d mapping sets stored after a refused one, want 1", len(docs))
	}
	if out, errOut, code := s.run(t, "template", "rm", "ubuntu-worker-small"); code != 0 {
		t.Errorf("template rm: %s%s", out, errOut)
	}
	if _, err := s.client().Render(ctx, "ubuntu-worker-small", "docker"); statusOf(err) != 404 {
		t.Errorf("render after rm = %v, want 404", err)
	}
}

func mustRender(t *testing.T, s *server, provider string) map[string]any {
	t.Helper()
	r, err := s.client().Render(context.Background(), "ubuntu-worker-small", provider)
	if err != nil {
		t.Fatal(err)
	}
	return r.Extra
}
