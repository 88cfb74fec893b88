package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, body := range []string{"first", "second, longer"} {
		if err := Write(path, []byte(body)); err != nil {
			t.Fatalf("Write(%q) = %v", body, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != body {
			t.Errorf("after Write(%q) the file holds %q, %v", body, got, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, %v; want 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the file", len(entries))
	}
}

func TestRemoveTempsKeepsStateFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.json", ".a.json.tmp-123", ".b.tmp-9", "notes.tmp"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o600)
	}
	if err := RemoveTemps(dir); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) != 2 || left[0] != "a.json" || left[1] != "notes.tmp" {
		t.Errorf("RemoveTemps left %v, want [a.json notes.tmp]", left)
	}
	if err := RemoveTemps(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("RemoveTemps of a missing dir = %v, want nil", err)
	}
}

func TestReadJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	path := filepath.Join(dir, "state.json")
	var v struct{ N int }
	if found, err := ReadJSON(path, &v); found || err != nil {
		t.Fatalf("ReadJSON(missing) = %v, %v; want not found, nil", found, err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("ReadJSON(missing) did not make the directory: %v", err)
	}
	if err := Write(path, []byte(`{"N": 7}`)); err != nil {
		t.Fatal(err)
	}
	if found, err := ReadJSON(path, &v); !found || err != nil || v.N != 7 {
		t.Errorf("ReadJSON = %v, %v, %+v; want found, nil, N 7", found, err, v)
	}
	os.WriteFile(path, []byte("{torn"), 0o600)
	if found, err := ReadJSON(path, &v); !found || !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadJSON(torn) = %v, %v; want found, ErrCorrupt", found, err)
	}
}

// positive is state whose Check refuses a negative number.
type positive struct{ N int }

func (p *positive) Check() error {
	if p.N < 0 {
		return errors.New("n is negative")
	}
	return nil
}

// ReadJSON runs a Checker's Check after decoding: content that makes no
// sense is corrupt, and the error says why.
func TestReadJSONChecks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for _, tc := range []struct {
		body    string
		corrupt bool
	}{{`{"N": 3}`, false}, {`{"N": -1}`, true}} {
		if err := Write(path, []byte(tc.body)); err != nil {
			t.Fatal(err)
		}
		var p positive
		found, err := ReadJSON(path, &p)
		if !found || errors.Is(err, ErrCorrupt) != tc.corrupt || (tc.corrupt && err.Error() != "n is negative") {
			t.Errorf("ReadJSON(%s) = %v, %v; want corrupt %v with the reason", tc.body, found, err, tc.corrupt)
		}
	}
}
