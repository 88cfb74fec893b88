package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func acquire(path, holder string) (*Lock, error) {
	// os.OpenFile sets O_CLOEXEC, so processes the agent starts do not
	// inherit the descriptor and cannot keep the lock alive after it dies.
	// Private, as everything in a data dir: an agent that runs suites as
	// other users seals its data dir, and would find its own lock open.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("acquire lock %s: %w", path, err)
	}
	if err := flock(f); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := readPID(f)
			f.Close()
			return nil, &HeldError{Path: path, PID: pid, Holder: holder}
		}
		f.Close()
		return nil, fmt.Errorf("acquire lock %s: %w", path, err)
	}
	if err := writePID(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("acquire lock %s: write pid: %w", path, err)
	}
	return &Lock{path: path, f: f}, nil
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}
