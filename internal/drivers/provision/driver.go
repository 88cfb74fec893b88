package provision

import (
	"crypto/rand"
	"encoding/hex"
)

// NameOrRandom is the spec's name, or, when it gives none, a fresh one:
// "nodemgr-" and 12 random hex digits, which every provider takes as a
// machine name.
func (s Spec) NameOrRandom() string {
	if s.Name != "" {
		return s.Name
	}
	b := make([]byte, 6)
	rand.Read(b)
	return "nodemgr-" + hex.EncodeToString(b)
}
