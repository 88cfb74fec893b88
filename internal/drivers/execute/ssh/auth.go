package ssh

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// defaultIdentities are the keys OpenSSH's client tries when none is
// named, under ~/.ssh.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// keyCache holds the keys read from files, by path.
type keyCache struct {
	mu   sync.Mutex
	keys map[string]ssh.Signer
}

// signers loads the keys of files; with none named, the default ones that
// exist and need no passphrase.
func (kc *keyCache) signers(files []string) ([]ssh.Signer, error) {
	explicit := len(files) > 0
	if !explicit {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nil
		}
		for _, n := range defaultIdentities {
			files = append(files, filepath.Join(home, ".ssh", n))
		}
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	var out []ssh.Signer
	for _, f := range files {
		if s := kc.keys[f]; s != nil {
			out = append(out, s)
			continue
		}
		s, err := readKey(f)
		var open *openKeyError
		if err != nil {
			// A default key that is missing, or needs a passphrase, is
			// not one to use; one open to others is a problem to hear of.
			if explicit || errors.As(err, &open) {
				return nil, err
			}
			continue
		}
		if kc.keys == nil {
			kc.keys = map[string]ssh.Signer{}
		}
		kc.keys[f] = s
		out = append(out, s)
	}
	return out, nil
}

func readKey(file string) (ssh.Signer, error) {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errdefs.Field("identity_file", "%s does not exist", file)
		}
		return nil, fmt.Errorf("identity_file: %w", errdefs.FromOS(err))
	}
	defer f.Close()
	if err := checkKeyMode(f); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("identity_file: %w", errdefs.FromOS(err))
	}
	s, err := ssh.ParsePrivateKey(b)
	var pp *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &pp):
		return nil, errdefs.Field("identity_file", "%s is protected by a passphrase; load it into an ssh-agent (SSH_AUTH_SOCK) instead", file)
	case err != nil:
		return nil, errdefs.Field("identity_file", "%s is not a private key nodemgr can read: %v", file, err)
	}
	return s, nil
}

// checkKeyMode refuses a private key that users other than its owner may
// read or write, as ssh does ("UNPROTECTED PRIVATE KEY FILE"): whoever
// can read it can log in wherever it does, so it is no proof of anything.
func checkKeyMode(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("identity_file: %w", errdefs.FromOS(err))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return &openKeyError{errdefs.Field("identity_file", "%s is open to other users (mode %04o), and ssh refuses such a key: run chmod 600 %s", f.Name(), perm, f.Name())}
	}
	return nil
}

// openKeyError is a key refused for its mode (a *errdefs.FieldError).
type openKeyError struct{ err error }

func (e *openKeyError) Error() string { return e.err.Error() }
func (e *openKeyError) Unwrap() error { return e.err }

// agentAuth returns the keys of the agent at $SSH_AUTH_SOCK, if one is
// set, and a function that closes the connection to it.
func agentAuth() (ssh.AuthMethod, func()) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, func() {}
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, func() {}
	}
	return ssh.PublicKeysCallback(agent.NewClient(c).Signers), func() { c.Close() }
}
