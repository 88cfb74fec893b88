package auth

import (
	"fmt"
	"os"
	"strings"
)

// ReadSecretFile reads a secret kept in a file, the way to hand one to a
// process without putting it on its command line, where every local user
// can read it (/proc/PID/cmdline). Surrounding white space is dropped.
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
	return secret, fi.Mode().Perm()&0o077 != 0, nil
}
