package cli

import (
	"bytes"
	"testing"
)

func TestTermSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\twith tab\n", "plain text\twith tab\n"},
		{"ünïcödé ✓", "ünïcödé ✓"},
		{"\u001b[2J\u001b[31mFAKE", `\x1b[2J\x1b[31mFAKE`},
		{"over\rwrite", `over\rwrite`},
		{"bell\a del\x7f nul\x00", `bell\x07 del\x7f nul\x00`},
		{"c1 csi \u009b2J", `c1 csi \u009b2J`},
		{"bad utf8 \xff\xfe", `bad utf8 \xff\xfe`},
	} {
		if got := termSafe(tc.in); got != tc.want {
			t.Errorf("termSafe(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSafeWriterSplitRune: a rune cut between two writes is kept whole,
// and a C1 control cut that way is still escaped.
func TestSafeWriterSplitRune(t *testing.T) {
	var out bytes.Buffer
	w := &safeWriter{w: &out}
	in := []byte("a✓b\u009bc")
	for i := range in {
		w.Write(in[i : i+1])
	}
	if got, want := out.String(), `a✓b\u009bc`; got != want {
		t.Errorf("byte-by-byte writes gave %q, want %q", got, want)
	}
}
