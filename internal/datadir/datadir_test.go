package datadir

import (
	"io/fs"
	"os"
	"path/filepath"
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
