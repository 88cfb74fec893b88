package datadir

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEnsure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial fs.FileMode // 0: does not exist
		wantWas fs.FileMode
	}{
		{"new", 0, 0},
		{"private already", 0o700, 0},
		{"readable by others", 0o755, 0o755},
		{"group-writable", 0o770, 0o770},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tc.initial != 0 {
				if err := os.Mkdir(dir, tc.initial); err != nil {
					t.Fatal(err)
				}
				os.Chmod(dir, tc.initial) // past the umask
			}
			was, err := Ensure(dir)
			if err != nil {
				t.Fatalf("Ensure(%s) = %v", tc.name, err)
			}
			if was != tc.wantWas {
				t.Errorf("Ensure(%s) was = %v, want %v", tc.name, was, tc.wantWas)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != Private {
				t.Errorf("mode after Ensure(%s) = %v, want %v", tc.name, fi.Mode().Perm(), Private)
			}
		})
	}
}

func TestEnsureRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, nil, 0o600)
	if _, err := Ensure(path); err == nil {
		t.Errorf("Ensure(a file) = nil, want an error")
	}
}

func TestPrivateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	if was, err := PrivateFile(path); was != 0 || err != nil {
		t.Errorf("PrivateFile(missing) = %v, %v, want 0, nil", was, err)
	}
	os.WriteFile(path, nil, 0o644)
	os.Chmod(path, 0o644)
	if was, err := PrivateFile(path); was != 0o644 || err != nil {
		t.Errorf("PrivateFile(0644) = %v, %v, want 0644, nil", was, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after PrivateFile = %v, want 0600", fi.Mode().Perm())
	}
}

func TestEnsurePassable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial fs.FileMode // 0: does not exist
		wantWas fs.FileMode
	}{
		{"new", 0, 0},
		{"private, as before tasks ran as others", 0o700, 0},
		{"passable already", 0o711, 0},
		{"readable by others", 0o755, 0o755},
		{"writable by the group", 0o770, 0o770},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "lib", "data")
			if tc.initial != 0 {
				os.MkdirAll(filepath.Dir(dir), 0o755)
				if err := os.Mkdir(dir, tc.initial); err != nil {
					t.Fatal(err)
				}
				os.Chmod(dir, tc.initial) // past the umask
			}
			was, err := EnsurePassable(dir)
			if err != nil || was != tc.wantWas {
				t.Fatalf("EnsurePassable(%s) = %v, %v; want was %v", tc.name, was, err, tc.wantWas)
			}
			for _, d := range []string{dir, filepath.Dir(dir)} {
				if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 || fi.Mode().Perm()&0o066 != 0 && d == dir {
					t.Errorf("after EnsurePassable(%s), %s has mode %v (%v): want others to pass through it, and no more for the data dir", tc.name, d, fi.Mode(), err)
				}
			}
		})
	}
}

// Seal leaves the shared entries and links alone and takes group and
// other rights away from the rest.
func TestSeal(t *testing.T) {
	dir := t.TempDir()
	files := map[string]fs.FileMode{"agent.json": 0o600, "agent.lock": 0o644, "ports.json": 0o640}
	dirs := map[string]fs.FileMode{"blobs": 0o755, "services": 0o700, "suites": 0o711, "software": 0o755}
	for name, mode := range files {
		os.WriteFile(filepath.Join(dir, name), nil, mode)
		os.Chmod(filepath.Join(dir, name), mode)
	}
	for name, mode := range dirs {
		os.Mkdir(filepath.Join(dir, name), mode)
		os.Chmod(filepath.Join(dir, name), mode)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, nil, 0o644)
	os.Chmod(outside, 0o644)
	os.Symlink(outside, filepath.Join(dir, "link"))
	changed, err := Seal(dir, "suites", "software")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{"agent.json": 0o600, "agent.lock": 0o600, "ports.json": 0o600,
		"blobs": 0o700, "services": 0o700, "suites": 0o711, "software": 0o755}
	for name, mode := range want {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("after Seal, %s: %v, %v; want mode %v", name, fi.Mode().Perm(), err, mode)
		}
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("Seal followed a link: its target is %v, %v; want 0644", fi.Mode(), err)
	}
	if !slices.Equal(changed, []string{"agent.lock", "blobs", "ports.json"}) {
		t.Errorf("Seal changed %v, want [agent.lock blobs ports.json]", changed)
	}
}
