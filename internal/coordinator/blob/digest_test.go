package blob_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
)

const helloHex = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")

func TestParseDigest(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string // a part of the message; "" for success
	}{
		{"sha256:" + helloHex, ""},
		{"", "empty"},
		{helloHex, "no algorithm"},
		{"sha512:" + helloHex, `algorithm "sha512" is not supported`},
		{"SHA256:" + helloHex, `algorithm "SHA256" is not supported`},
		{"sha256:" + helloHex[:63], "63 hex digits, want 64"},
		{"sha256:" + helloHex + "0", "65 hex digits, want 64"},
		{"sha256:", "0 hex digits, want 64"},
		{"sha256:" + strings.ToUpper(helloHex), "uppercase hex digit 'C' at 1"},
		{"sha256:" + helloHex[:10] + "g" + helloHex[11:], "'g' at 10 is not a hex digit"},
		{"sha256:" + helloHex[:63] + " ", "' ' at 63 is not a hex digit"},
		{"sha256:../../../../etc/passwd" + strings.Repeat("x", 64-22), "'.' at 0 is not a hex digit"},
	}
	for _, tc := range tests {
		d, err := blob.ParseDigest(tc.in)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseDigest(%q) = %v, want success", tc.in, err)
		case tc.wantErr == "" && (d.String() != tc.in || d.Hex() != helloHex || d != blob.Sum([]byte("hello"))):
			t.Errorf("ParseDigest(%q) = %s (hex %s), want the digest of hello", tc.in, d, d.Hex())
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errdefs.ErrInvalid)):
			t.Errorf("ParseDigest(%q) = %v, want an ErrInvalid saying %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestParseDigestShortensLongInput(t *testing.T) {
	_, err := blob.ParseDigest("sha256:" + strings.Repeat("a", 10000))
	if err == nil || len(err.Error()) > 200 {
		t.Errorf("ParseDigest(10 kB) = %d-byte error, want a short one", len(err.Error()))
	}
}

func TestDigestText(t *testing.T) {
	type doc struct {
		Input  blob.Digest `json:"input"`
		Output blob.Digest `json:"output"`
	}
	in := doc{Input: blob.Sum([]byte("hello"))}
	b, err := json.Marshal(in)
	if want := `{"input":"sha256:` + helloHex + `","output":""}`; err != nil || string(b) != want {
		t.Fatalf("json.Marshal = %s, %v; want %s", b, err, want)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("json.Unmarshal(%s) = %+v, %v; want %+v", b, out, err, in)
	}
	if err := json.Unmarshal([]byte(`{"input":"md5:x"}`), &out); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("json.Unmarshal(md5 digest) = %v, want ErrInvalid", err)
	}
	if (blob.Digest{}).String() != "" || !(blob.Digest{}).IsZero() || blob.Sum(nil).IsZero() {
		t.Errorf("zero Digest: String %q, IsZero %v; Sum(nil).IsZero %v", blob.Digest{}, blob.Digest{}.IsZero(), blob.Sum(nil).IsZero())
	}
}
