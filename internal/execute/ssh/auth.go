package ssh

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/nodemgr/nodemgr/internal/errdefs"
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
		if err != nil {
			if explicit {
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
	b, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errdefs.Field("identity_file", "%s does not exist", file)
		}
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
