package sha256sum

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The digest of "abc" is FIPS 180-2's first example.
const abc = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

func TestReader(t *testing.T) {
	d, n, err := Reader(strings.NewReader("abc"))
	if err != nil || d != abc || n != 3 {
		t.Errorf(`Reader("abc") = %q, %d, %v, want %q, 3, nil`, d, n, err, abc)
	}
}

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, n, err := File(p)
	if err != nil || d != abc || n != 3 {
		t.Errorf("File(%q) = %q, %d, %v, want %q, 3, nil", p, d, n, err, abc)
	}
	if got, want := Hex(d), strings.TrimPrefix(abc, "sha256:"); got != want {
		t.Errorf("Hex(%q) = %q, want %q", d, got, want)
	}
	if _, _, err := File(filepath.Join(t.TempDir(), "none")); !os.IsNotExist(err) {
		t.Errorf("File(missing) = %v, want a not-exist error", err)
	}
}
