package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nodemgr/nodemgr/internal/base/datadir"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// Suite tasks, hooks and services run as other users than the agent
// (package runas): an agent that runs as root starts them as the suite's
// run_as, or as an unprivileged default. They must reach their work dirs
// inside the data dir, and nothing else there: the data dir is 0711 (pass
// through, no listing), every entry but the shared trees is private
// (sealDataDir), and a suite's work dir is its user's only while the
// suite runs here (giveWorkDir, takeWorkDir).

// sharedEntries are what others may reach in the data dir: the suites'
// work dirs, and the software and runtime trees when the prefix is the
// data dir.
func (a *Agent) sharedEntries() []string {
	shared := []string{"suites"}
	if a.cfg.Prefix == a.cfg.DataDir {
		shared = append(shared, "software", "runtime")
	}
	return shared
}

// suitesDir holds the suites' work dirs: the agent's, passable by others.
func (a *Agent) suitesDir() string { return filepath.Join(a.cfg.DataDir, "suites") }

// sealDataDir makes everything in the data dir private but the shared
// trees, and the suites dir passable, before code of others runs; it
// says what it had to change. It does nothing for an agent that runs
// everything as itself.
func (a *Agent) sealDataDir() error {
	if !a.users.Switch {
		return nil
	}
	if err := os.MkdirAll(a.suitesDir(), 0o711); err != nil {
		return fmt.Errorf("suites dir: %w", err)
	}
	if err := os.Chmod(a.suitesDir(), 0o711); err != nil {
		return fmt.Errorf("suites dir: %w", err)
	}
	changed, err := datadir.Seal(a.cfg.DataDir, a.sharedEntries()...)
	if len(changed) > 0 {
		a.log.Warn("entries of the data dir were open to other users; made them private", "dir", a.cfg.DataDir, "entries", changed)
	}
	if err != nil {
		return err
	}
	if err := runas.Reach(a.users.Default, a.suitesDir()); err != nil {
		a.log.Warn("suites that name no user cannot run here until this is fixed", "err", err)
	}
	return nil
}

// switchTo is the user to start a suite's code as: nil when that is the
// agent's own user.
func (a *Agent) switchTo(u runas.User) *runas.User {
	if !a.users.Other(u) {
		return nil
	}
	return &u
}

// giveWorkDir makes a suite's work dir (in the agent's suites dir, which
// no one else may change) and gives it to the user the suite's code runs
// as (nil: the agent's own), mode 0700, after checking that user can
// reach it.
func (a *Agent) giveWorkDir(workDir string, as *runas.User) error {
	if err := os.MkdirAll(filepath.Dir(workDir), 0o711); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	if err := os.Mkdir(workDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("work dir: %w", err)
	}
	fi, err := os.Lstat(workDir)
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("work dir %s is not a directory", workDir)
	}
	owner := a.users.Self
	if as != nil {
		owner = *as
		if err := runas.Reach(*as, workDir); err != nil {
			return fmt.Errorf("run_as %s: %w", as.Name, err)
		}
		if err := giveTreeOnce(workDir, *as); err != nil {
			return err
		}
	}
	if err := os.Lchown(workDir, int(owner.UID), int(owner.GID)); err != nil && as != nil {
		return fmt.Errorf("give the work dir to %s: %w", owner, err)
	}
	return os.Chmod(workDir, 0o700)
}

// giveTreeOnce gives what is in a work dir to u where it was last given
// to someone else, or never (an agent that ran suites as itself made it),
// so that the suite's hooks may change what earlier ones left. Who it was
// given to is kept beside it, in the agent's suites dir (<ID>.uid): the
// tree is walked once, not at every take-up.
func giveTreeOnce(workDir string, u runas.User) error {
	record := workDir + ".uid"
	uid := strconv.FormatUint(uint64(u.UID), 10)
	if b, err := os.ReadFile(record); err == nil && string(b) == uid {
		return nil
	}
	if err := giveTree(workDir, u); err != nil {
		return err
	}
	return os.WriteFile(record, []byte(uid), 0o600)
}

// giveTree gives everything below workDir to u, through an os.Root: the
// tree may hold links.
func giveTree(workDir string, u runas.User) error {
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if err := root.Lchown(filepath.FromSlash(p), int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("give the work dir to %s: %w", u, err)
		}
		return nil
	})
}

// takeWorkDir takes a suite's work dir back once the suite has left: no
// one else may enter it until the suite runs here again, so that the next
// suite's code (perhaps the same default user) cannot read what this one
// left there.
func (a *Agent) takeWorkDir(workDir string, as *runas.User) {
	if as == nil {
		return
	}
	if err := os.Lchown(workDir, int(a.users.Self.UID), int(a.users.Self.GID)); err != nil {
		a.log.Warn("take a suite's work dir back", "dir", workDir, "err", err)
	}
	os.Chmod(workDir, 0o700)
}
