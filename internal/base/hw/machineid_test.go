package hw

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestMachineIDStable(t *testing.T) {
	dir := t.TempDir()
	first, err := MachineID(dir)
	if err != nil {
		t.Fatalf("MachineID(%q) = %v", dir, err)
	}
	if first == "" {
		t.Fatalf("MachineID(%q) is empty", dir)
	}
	for range 3 {
		if got, err := MachineID(dir); err != nil || got != first {
			t.Fatalf("MachineID(%q) again = %q, %v, want %q", dir, got, err, first)
		}
	}
}

var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestMachineIDSources(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // system files ("a", "b") and the data dir's id ("data")
		want  string            // "" means a freshly generated id
	}{
		{name: "first", files: map[string]string{"a": "aaaa\n", "b": "bbbb\n"}, want: "aaaa"},
		{name: "second when first missing", files: map[string]string{"b": "bbbb\n"}, want: "bbbb"},
		{name: "second when first blank", files: map[string]string{"a": "\n", "b": "bbbb"}, want: "bbbb"},
		{name: "second when first uninitialized", files: map[string]string{"a": "uninitialized\n", "b": "bbbb\n"}, want: "bbbb"},
		{name: "system wins over data dir", files: map[string]string{"b": "bbbb\n", "data": "dddd\n"}, want: "bbbb"},
		{name: "data dir", files: map[string]string{"data": "dddd\n"}, want: "dddd"},
		{name: "generated", files: map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sys, data := t.TempDir(), t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(sys, name)
				if name == "data" {
					p = filepath.Join(data, MachineIDFile)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			sources := []string{filepath.Join(sys, "a"), filepath.Join(sys, "b")}

			got, err := machineID(data, sources)
			if err != nil {
				t.Fatalf("machineID() = %v", err)
			}
			if tc.want != "" {
				if got != tc.want {
					t.Errorf("machineID() = %q, want %q", got, tc.want)
				}
				return
			}

			if !generatedID.MatchString(got) {
				t.Errorf("machineID() = %q, want 32 hex digits", got)
			}
			path := filepath.Join(data, MachineIDFile)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatalf("generated id not kept: %v", err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("%s has mode %v, want 0600", path, perm)
			}
			if again, err := machineID(data, sources); err != nil || again != got {
				t.Errorf("machineID() again = %q, %v, want %q", again, err, got)
			}
			entries, _ := os.ReadDir(data)
			if len(entries) != 1 {
				t.Errorf("data dir holds %d entries, want just %s", len(entries), MachineIDFile)
			}
		})
	}
}

func TestMachineIDErrors(t *testing.T) {
	none := []string{filepath.Join(t.TempDir(), "none")}

	t.Run("empty kept id", func(t *testing.T) {
		data := t.TempDir()
		if err := os.WriteFile(filepath.Join(data, MachineIDFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := machineID(data, none); err == nil {
			t.Errorf("machineID() = %q, want error for an empty id file", got)
		}
	})
	t.Run("missing data dir", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "missing")
		if got, err := machineID(data, none); err == nil {
			t.Errorf("machineID(%q) = %q, want error", data, got)
		}
	})
}
