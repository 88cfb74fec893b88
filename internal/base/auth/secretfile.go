package auth

import (
	"fmt"
	"os"
	"strings"
)

// ReadSecretFile reads a secret kept in a file, the way to hand one to a
// process without putting it on its command line, where every local user
// can read it (/proc/PID/cmdline). Surrounding white space is dropped; a
// file with more than the one word of a secret is refused, since sending
// it whole would fail at every try (a banner saved with the token, say).
// openToOthers says that users other than the owner may read the file.
func ReadSecretFile(path string) (secret string, openToOthers bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	b := make([]byte, 4096) // far more than any nodemgr secret
	n, _ := f.Read(b)
	secret = strings.TrimSpace(string(b[:n]))
	if secret == "" {
		return "", false, fmt.Errorf("%s is empty: write the secret into it", path)
	}
	if words := strings.Fields(secret); len(words) > 1 {
		return "", false, fmt.Errorf("%s holds %d words, not one secret: keep only the secret in it (nodemgr token create and join-token create print only the secret when their output goes to a file)", path, len(words))
	}
	return secret, fi.Mode().Perm()&0o077 != 0, nil
}
