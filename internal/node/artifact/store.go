package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// Defaults for zero Options fields.
const (
	DefaultMaxBytes = 4 << 30 // archive size, and total unpacked size
	DefaultMaxFiles = 100_000 // archive entries
)

// defaultWaits are the waits before each download try: three tries, the
// first at once (DESIGN.md, "artifact download").
var defaultWaits = []time.Duration{0, 5 * time.Second, 15 * time.Second}

const manifestName = ".nodemgr-artifact.json"

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Client fetches from depots; nil means a client whose transport gives
	// up on a depot that sends no response headers within a minute.
	Client *http.Client
	// RetryWaits are the waits before each try of a depot request, so its
	// length is the number of tries; empty means 0 s, 5 s, 15 s.
	RetryWaits []time.Duration
	// MaxBytes caps the archive download and, separately, the total size
	// of the files it unpacks to; 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxFiles caps the number of entries in an archive; 0 means
	// DefaultMaxFiles.
	MaxFiles int
	// UsedBy names what runs from an installed artifact (services);
	// Remove refuses an artifact in use and says by what. It is called with
	// the id's lock held, so an Install of the same id waits for it. Nil
	// means never in use.
	UsedBy func(ID) []string
	// Logger receives retries and installs; nil discards.
	Logger *slog.Logger
}

// Installed describes one installed artifact version.
type Installed struct {
	ID          ID        `json:"id"`
	Path        string    `json:"path"`         // the read-only tree
	Source      string    `json:"source"`       // URL of the archive
	Checksum    string    `json:"checksum"`     // "sha256:<hex>" or "md5:<hex>", as verified against the depot
	Size        int64     `json:"size"`         // bytes of the unpacked files
	Files       int       `json:"files"`        // entries unpacked
	InstalledAt time.Time `json:"installed_at"` // UTC
}

// manifest is what an install records about itself, in its tree.
type manifest struct {
	ID          ID        `json:"id"`
	Source      string    `json:"source"`
	Checksum    string    `json:"checksum"`
	Size        int64     `json:"size"`
	Files       int       `json:"files"`
	InstalledAt time.Time `json:"installed_at"`
}

// Store installs, lists and removes artifacts under one prefix. It is safe
// for concurrent use. One Store should own a prefix: New clears leftovers
// of interrupted installs.
type Store struct {
	software string // <prefix>/software
	tmp      string // <prefix>/software/.tmp: staging on the same file system
	depots   map[string]string
	client   *http.Client
	waits    []time.Duration
	maxBytes int64
	maxFiles int
	usedBy   func(ID) []string
	log      *slog.Logger

	mu    sync.Mutex
	locks map[ID]*idLock

	// tree is held while group and artifact directories are created or
	// removed, so Remove never deletes a directory that an Install of a
	// sibling version is about to rename into.
	tree sync.Mutex
}

// idLock serialises work on one id; refs counts holders and waiters so the
// entry can be dropped when nobody needs it.
type idLock struct {
	ch   chan struct{}
	refs int
}

// New returns a Store that installs under <prefix>/software, fetching each
// group's artifacts from the depot base URL depots[group].
func New(prefix string, depots map[string]string, opts Options) (*Store, error) {
	if prefix == "" {
		return nil, fmt.Errorf("new artifact store: prefix is empty: %w", errdefs.ErrInvalid)
	}
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return nil, fmt.Errorf("new artifact store: %w", err)
	}
	s := &Store{
		software: filepath.Join(abs, "software"),
		depots:   make(map[string]string, len(depots)),
		client:   opts.Client,
		waits:    slices.Clone(opts.RetryWaits),
		maxBytes: opts.MaxBytes,
		maxFiles: opts.MaxFiles,
		usedBy:   opts.UsedBy,
		log:      opts.Logger,
		locks:    map[ID]*idLock{},
	}
	s.tmp = filepath.Join(s.software, ".tmp")
	for group, base := range depots {
		if why := workload.CheckArtifactPart(group); why != "" {
			return nil, fmt.Errorf("new artifact store: depot group %q %s: %w", group, why, errdefs.ErrInvalid)
		}
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("new artifact store: depot for group %q: %q is not an http(s) URL: %w", group, base, errdefs.ErrInvalid)
		}
		s.depots[group] = strings.TrimRight(base, "/")
	}
	if s.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = time.Minute
		s.client = &http.Client{Transport: t}
	}
	if len(s.waits) == 0 {
		s.waits = slices.Clone(defaultWaits)
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if s.maxFiles <= 0 {
		s.maxFiles = DefaultMaxFiles
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(s.software, 0o755); err != nil {
		return nil, fmt.Errorf("new artifact store: %w", err)
	}
	if err := removeTree(s.tmp); err != nil {
		return nil, fmt.Errorf("new artifact store: clear %s: %w", s.tmp, err)
	}
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		return nil, fmt.Errorf("new artifact store: %w", err)
	}
	return s, nil
}

// Path returns the directory id is (or would be) installed in, or "" if id
// is not valid.
func (s *Store) Path(id ID) string {
	if id.Validate() != nil {
		return ""
	}
	return filepath.Join(s.software, id.Group, id.Artifact, id.Version)
}

// Install fetches, verifies and unpacks id, unless it is installed already,
// in which case it returns the existing install and fetches nothing.
// Concurrent installs of one id are serialised: one downloads, the others
// find it installed.
func (s *Store) Install(ctx context.Context, id ID) (Installed, error) {
	if err := id.Validate(); err != nil {
		return Installed{}, fmt.Errorf("install artifact: %w", err)
	}
	base, ok := s.depots[id.Group]
	if !ok {
		return Installed{}, fmt.Errorf("install artifact %s: no depot is configured for group %q; give the agent one (depots in its config, or --depot %s=URL): %w", id, id.Group, id.Group, errdefs.ErrNotFound)
	}
	unlock, err := s.lock(ctx, id)
	if err != nil {
		return Installed{}, fmt.Errorf("install artifact %s: %w", id, err)
	}
	defer unlock()

	inst, ok, err := s.read(id)
	if err != nil {
		return Installed{}, fmt.Errorf("install artifact %s: %w", id, err)
	}
	if ok {
		return inst, nil
	}
	start := time.Now()
	inst, err = s.install(ctx, id, base)
	if err != nil {
		return Installed{}, fmt.Errorf("install artifact %s: %w", id, err)
	}
	s.log.Info("artifact installed", "id", id.String(), "source", inst.Source,
		"bytes", inst.Size, "files", inst.Files, "took", time.Since(start).Round(time.Millisecond))
	return inst, nil
}

func (s *Store) install(ctx context.Context, id ID, base string) (Installed, error) {
	stage, err := os.MkdirTemp(s.tmp, "install-")
	if err != nil {
		return Installed{}, err
	}
	defer func() {
		if err := removeTree(stage); err != nil {
			s.log.Warn("artifact: remove staging dir", "dir", stage, "err", err)
		}
	}()

	arch, err := s.download(ctx, id, base, stage)
	if err != nil {
		return Installed{}, err
	}
	tree := filepath.Join(stage, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return Installed{}, err
	}
	st, err := extract(arch, tree, s.maxBytes, s.maxFiles)
	if err != nil {
		return Installed{}, err
	}
	m := manifest{
		ID:          id,
		Source:      arch.url,
		Checksum:    arch.checksum,
		Size:        st.size,
		Files:       st.files,
		InstalledAt: time.Now().UTC(),
	}
	if err := writeManifest(filepath.Join(tree, manifestName), m); err != nil {
		return Installed{}, err
	}

	final := s.Path(id)
	s.tree.Lock()
	err = os.MkdirAll(filepath.Dir(final), 0o755)
	if err == nil {
		// The tree's own mode stays writable until here: moving a directory
		// to a new parent rewrites its ".." entry, which needs write access.
		err = os.Rename(tree, final)
	}
	s.tree.Unlock()
	if err != nil {
		return Installed{}, err
	}
	if err := os.Chmod(final, 0o555); err != nil {
		return Installed{}, err
	}
	syncDir(filepath.Dir(final))
	return m.installed(final), nil
}

func writeManifest(path string, m manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(0o444)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (m manifest) installed(path string) Installed {
	return Installed{
		ID:          m.ID,
		Path:        path,
		Source:      m.Source,
		Checksum:    m.Checksum,
		Size:        m.Size,
		Files:       m.Files,
		InstalledAt: m.InstalledAt,
	}
}

// read returns id's install; ok is false if id is not installed. A
// directory without a readable manifest was not put there by a Store and is
// reported as a conflict rather than silently overwritten or listed.
func (s *Store) read(id ID) (inst Installed, ok bool, err error) {
	dir := s.Path(id)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return Installed{}, false, nil
	} else if err != nil {
		return Installed{}, false, err
	}
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(dir); errors.Is(serr, fs.ErrNotExist) {
			return Installed{}, false, nil // removed meanwhile (List holds no lock)
		}
		return Installed{}, false, fmt.Errorf("%s exists but has no %s; it was not installed by nodemgr: %w", dir, manifestName, errdefs.ErrConflict)
	}
	if err != nil {
		return Installed{}, false, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Installed{}, false, fmt.Errorf("read %s: %w", filepath.Join(dir, manifestName), err)
	}
	if m.ID != id {
		return Installed{}, false, fmt.Errorf("%s records id %s, want %s: %w", filepath.Join(dir, manifestName), m.ID, id, errdefs.ErrConflict)
	}
	return m.installed(dir), true, nil
}

// Get returns id's install, or an error that matches errdefs.ErrNotFound
// and says how to install it.
func (s *Store) Get(id ID) (Installed, error) {
	if err := id.Validate(); err != nil {
		return Installed{}, err
	}
	inst, ok, err := s.read(id)
	if err != nil {
		return Installed{}, fmt.Errorf("artifact %s: %w", id, err)
	}
	if !ok {
		return Installed{}, errdefs.NotFound("artifact %s is not installed on this node (install it with `nodemgr artifact install NODE %s`)", id, id)
	}
	return inst, nil
}

// List returns the installed artifacts, sorted by group, artifact and
// version. Directories that hold no valid install are logged and skipped.
func (s *Store) List() ([]Installed, error) {
	var out []Installed
	groups, err := readDirs(s.software)
	if err != nil {
		return nil, fmt.Errorf("list artifacts: %w", err)
	}
	for _, g := range groups {
		artifacts, err := readDirs(filepath.Join(s.software, g))
		if err != nil {
			return nil, fmt.Errorf("list artifacts: %w", err)
		}
		for _, a := range artifacts {
			versions, err := readDirs(filepath.Join(s.software, g, a))
			if err != nil {
				return nil, fmt.Errorf("list artifacts: %w", err)
			}
			for _, v := range versions {
				id := ID{Group: g, Artifact: a, Version: v}
				inst, ok, err := s.read(id)
				if err != nil {
					s.log.Warn("artifact: skipping directory", "id", id.String(), "err", err)
					continue
				}
				if ok {
					out = append(out, inst)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Installed) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	return out, nil
}

// readDirs lists the subdirectories of dir that are valid id parts (so the
// store's own .tmp and stray files are left out). A directory removed
// meanwhile lists as empty.
func readDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && workload.CheckArtifactPart(e.Name()) == "" {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Remove uninstalls id. It refuses with errdefs.ErrConflict while
// Options.UsedBy names users of id (see ForceRemove), and returns errdefs.ErrNotFound if id is
// not installed. The tree leaves its place with one rename before it is
// deleted, so a crash never leaves a half-deleted install behind.
func (s *Store) Remove(id ID) error {
	_, err := s.remove(id, false)
	return err
}

// ForceRemove uninstalls id even while Options.UsedBy names users, and
// returns them: they cannot start again until id is installed again.
func (s *Store) ForceRemove(id ID) (broken []string, err error) {
	return s.remove(id, true)
}

func (s *Store) remove(id ID, force bool) (users []string, err error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("remove artifact: %w", err)
	}
	unlock, err := s.lock(context.Background(), id)
	if err != nil {
		return nil, fmt.Errorf("remove artifact %s: %w", id, err)
	}
	defer unlock()

	_, ok, err := s.read(id)
	if err != nil {
		return nil, fmt.Errorf("remove artifact %s: %w", id, err)
	}
	if !ok {
		return nil, fmt.Errorf("remove artifact %s: not installed: %w", id, errdefs.ErrNotFound)
	}
	if s.usedBy != nil {
		users = s.usedBy(id)
	}
	if len(users) > 0 && !force {
		return nil, fmt.Errorf("remove artifact %s: in use by service %s (a stopped service is restarted from it too); "+
			"remove each first with `nodemgr service stop NODE COORDINATE` and `nodemgr service rm NODE COORDINATE`, "+
			"or remove it anyway with `nodemgr artifact rm --force`, which leaves them unable to start: %w",
			id, strings.Join(users, ", "), errdefs.ErrConflict)
	}
	trash, err := os.MkdirTemp(s.tmp, "remove-")
	if err != nil {
		return nil, fmt.Errorf("remove artifact %s: %w", id, err)
	}
	final := s.Path(id)
	s.tree.Lock()
	err = os.Chmod(final, 0o755) // see install: a moved directory must be writable
	if err == nil {
		if err = os.Rename(final, filepath.Join(trash, "tree")); err != nil {
			_ = os.Chmod(final, 0o555)
		}
	}
	if err == nil {
		// Drop the artifact and group directories once they are empty; a
		// failure just means another version is still there.
		if os.Remove(filepath.Dir(final)) == nil {
			_ = os.Remove(filepath.Dir(filepath.Dir(final)))
		}
	}
	s.tree.Unlock()
	if rerr := removeTree(trash); rerr != nil {
		s.log.Warn("artifact: delete removed tree", "dir", trash, "err", rerr)
	}
	if err != nil {
		return nil, fmt.Errorf("remove artifact %s: %w", id, err)
	}
	if len(users) > 0 {
		s.log.Warn("artifact removed by force while services use it; they cannot start until it is installed again", "id", id.String(), "services", users)
	} else {
		s.log.Info("artifact removed", "id", id.String())
	}
	return users, nil
}

// lock takes id's lock, waiting until it is free or ctx is done.
func (s *Store) lock(ctx context.Context, id ID) (unlock func(), err error) {
	s.mu.Lock()
	l := s.locks[id]
	if l == nil {
		l = &idLock{ch: make(chan struct{}, 1)}
		s.locks[id] = l
	}
	l.refs++
	s.mu.Unlock()

	select {
	case l.ch <- struct{}{}:
		return func() {
			<-l.ch
			s.unref(id, l)
		}, nil
	case <-ctx.Done():
		s.unref(id, l)
		return nil, ctx.Err()
	}
}

func (s *Store) unref(id ID, l *idLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(s.locks, id)
	}
}

// removeTree deletes dir, first making its directories writable again.
func removeTree(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// syncDir makes a rename in dir durable, where the platform allows it.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		_ = f.Close()
	}
}
