package hw

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SystemMachineIDFiles are where the OS keeps its machine id, best first
// (systemd, then D-Bus on systems without systemd). The orchestrator reads
// them on a pool machine to know the id its agent will register with.
var SystemMachineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// MachineIDFile is the name of the id MachineID keeps in the data dir when
// the OS has none (minimal containers, most non-Linux systems).
const MachineIDFile = "machine-id"

// MachineID returns an identifier of this machine that stays the same
// across agent restarts: the OS's machine id if it has one, else a random
// id created on first use and kept in dataDir/machine-id (mode 0600).
func MachineID(dataDir string) (string, error) {
	return machineID(dataDir, SystemMachineIDFiles)
}

// MachineIDFrom is MachineID with the OS's id files given: what an agent
// whose system files are elsewhere finds (the orchestrator's tests check
// its reading of a machine against it).
func MachineIDFrom(dataDir string, systemFiles []string) (string, error) {
	return machineID(dataDir, systemFiles)
}

func machineID(dataDir string, systemFiles []string) (string, error) {
	for _, p := range systemFiles {
		// Missing, unreadable or blank: try the next source.
		if id, err := readID(p); err == nil && id != "" {
			return id, nil
		}
	}
	path := filepath.Join(dataDir, MachineIDFile)
	id, err := readID(path)
	switch {
	case err == nil && id != "":
		return id, nil
	case err == nil:
		return "", fmt.Errorf("read machine id %s: file is empty", path)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("read machine id: %w", err)
	}
	return createID(path)
}

// readID reads an id file. systemd writes "uninitialized" into
// /etc/machine-id while first boot is underway; that is no id.
func readID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "uninitialized" {
		id = ""
	}
	return id, nil
}

// createID makes a random id in the systemd format (32 hex digits) and
// stores it at path. It writes a temporary file and links it into place,
// so a reader never sees a half-written id and, if two callers race, both
// return the one that landed.
func createID(path string) (string, error) {
	id := hex.EncodeToString(randomBytes(16))
	tmp, err := os.CreateTemp(filepath.Dir(path), ".machine-id-*") // mode 0600
	if err != nil {
		return "", fmt.Errorf("create machine id: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("create machine id: %w", err)
	}
	err = os.Link(tmp.Name(), path)
	if errors.Is(err, fs.ErrExist) {
		id, err = readID(path)
		if err == nil && id == "" {
			err = errors.New("file is empty")
		}
		if err != nil {
			return "", fmt.Errorf("read machine id %s: %w", path, err)
		}
		return id, nil
	}
	if err != nil {
		// Some filesystems have no hard links. Rename is atomic as well; it
		// can only lose a race that the data dir's lock already prevents.
		if err := os.Rename(tmp.Name(), path); err != nil {
			return "", fmt.Errorf("create machine id: %w", err)
		}
	}
	return id, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails: crypto/rand panics rather than return short
	return b
}
