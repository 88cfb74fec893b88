package ssh

import (
	"slices"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestCiphers: ChaCha20-Poly1305 comes first, and the list offers every
// cipher x/crypto/ssh offers by default, no more, so that only the order
// differs from what a server saw before.
func TestCiphers(t *testing.T) {
	if ciphers[0] != ssh.CipherChaCha20Poly1305 {
		t.Errorf("ciphers[0] = %q, want %q", ciphers[0], ssh.CipherChaCha20Poly1305)
	}
	var def ssh.Config
	def.SetDefaults()
	got, want := slices.Sorted(slices.Values(ciphers)), slices.Sorted(slices.Values(def.Ciphers))
	if !slices.Equal(got, want) {
		t.Errorf("ciphers = %v, want the defaults %v reordered", got, want)
	}
}
