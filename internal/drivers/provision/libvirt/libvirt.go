package libvirt

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/records"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Labels the provider puts on every domain it makes (in its metadata),
// besides the spec's.
const (
	LabelDeployment = "nodemgr.deployment" // the machine name
	LabelTemplate   = "nodemgr.template"
)

// Capabilities of a libvirt deployment: its Address is host:port of the
// guest's SSH server, and Extra["ssh_user"] is the template's user (the
// ssh executor logs in as it).
const (
	CapExec  = "exec:ssh"
	CapSFTP  = "copy:sftp"
	CapRsync = "copy:rsync"
)

// Defaults of the settings.
const (
	DefaultURI          = "qemu:///system"
	DefaultPool         = "default"
	DefaultStopTimeout  = 30 * time.Second
	DefaultReadyTimeout = 5 * time.Minute
)

const (
	// cleanupTimeout bounds the removal of a half-made machine, which
	// runs even when the caller's context is done.
	cleanupTimeout = time.Minute
	// dialTimeout bounds reaching the daemon's socket.
	dialTimeout = 10 * time.Second
	// defaultSocket is libvirtd's system socket.
	defaultSocket = "/var/run/libvirt/libvirt-sock"
)

func init() {
	d := records.Libvirt
	d.New = func(settings map[string]string) (provision.Provider, error) { return New(settings) }
	provision.Register(d)
}

// client is the part of go-libvirt's RPC client the provider uses.
type client interface {
	IsConnected() bool
	Disconnect() error
	ConnectListAllDomains(needResults int32, flags golibvirt.ConnectListAllDomainsFlags) ([]golibvirt.Domain, uint32, error)
	DomainLookupByName(name string) (golibvirt.Domain, error)
	DomainLookupByUUID(uuid golibvirt.UUID) (golibvirt.Domain, error)
	DomainDefineXML(xml string) (golibvirt.Domain, error)
	DomainGetXMLDesc(dom golibvirt.Domain, flags golibvirt.DomainXMLFlags) (string, error)
	DomainGetMetadata(dom golibvirt.Domain, typ int32, uri golibvirt.OptString, flags golibvirt.DomainModificationImpact) (string, error)
	DomainGetState(dom golibvirt.Domain, flags uint32) (int32, int32, error)
	DomainHasManagedSaveImage(dom golibvirt.Domain, flags uint32) (int32, error)
	DomainCreate(dom golibvirt.Domain) error
	DomainShutdown(dom golibvirt.Domain) error
	DomainDestroy(dom golibvirt.Domain) error
	DomainUndefineFlags(dom golibvirt.Domain, flags golibvirt.DomainUndefineFlagsValues) error
	DomainManagedSave(dom golibvirt.Domain, flags uint32) error
	DomainManagedSaveRemove(dom golibvirt.Domain, flags uint32) error
	DomainReboot(dom golibvirt.Domain, flags golibvirt.DomainRebootFlagValues) error
	DomainReset(dom golibvirt.Domain, flags uint32) error
	DomainResume(dom golibvirt.Domain) error
	DomainPmWakeup(dom golibvirt.Domain, flags uint32) error
	DomainInterfaceAddresses(dom golibvirt.Domain, source uint32, flags uint32) ([]golibvirt.DomainInterface, error)
	SubscribeEvents(ctx context.Context, eventID golibvirt.DomainEventID, dom golibvirt.OptDomain) (<-chan any, error)
	StoragePoolLookupByName(name string) (golibvirt.StoragePool, error)
	StoragePoolRefresh(pool golibvirt.StoragePool, flags uint32) error
	StoragePoolIsActive(pool golibvirt.StoragePool) (int32, error)
	StoragePoolDefineXML(xml string, flags uint32) (golibvirt.StoragePool, error)
	StoragePoolBuild(pool golibvirt.StoragePool, flags golibvirt.StoragePoolBuildFlags) error
	StoragePoolCreate(pool golibvirt.StoragePool, flags golibvirt.StoragePoolCreateFlags) error
	StoragePoolSetAutostart(pool golibvirt.StoragePool, autostart int32) error
	StoragePoolUndefine(pool golibvirt.StoragePool) error
	StorageVolLookupByName(pool golibvirt.StoragePool, name string) (golibvirt.StorageVol, error)
	StorageVolLookupByPath(path string) (golibvirt.StorageVol, error)
	StorageVolGetXMLDesc(vol golibvirt.StorageVol, flags uint32) (string, error)
	StorageVolGetPath(vol golibvirt.StorageVol) (string, error)
	StorageVolCreateXML(pool golibvirt.StoragePool, xml string, flags golibvirt.StorageVolCreateFlags) (golibvirt.StorageVol, error)
	StorageVolUpload(vol golibvirt.StorageVol, r io.Reader, offset, length uint64, flags golibvirt.StorageVolUploadFlags) error
	StorageVolDelete(vol golibvirt.StorageVol, flags golibvirt.StorageVolDeleteFlags) error
	NetworkLookupByName(name string) (golibvirt.Network, error)
	NetworkGetXMLDesc(net golibvirt.Network, flags uint32) (string, error)
	NetworkIsActive(net golibvirt.Network) (int32, error)
}

// Libvirt provisions virtual machines through one libvirt daemon.
type Libvirt struct {
	uri          *url.URL
	pool         string
	poolDir      string // where pool is made when missing
	domainType   string
	stopTimeout  time.Duration
	readyTimeout time.Duration
	// connect opens a connection; tests may replace it.
	connect func() (client, error)

	mu   sync.Mutex
	conn client
	// poolMu keeps this server's provisions from making the pool twice.
	poolMu sync.Mutex
}

// New returns a provider for the libvirt daemon that settings name (see
// the package doc). It does not contact the daemon: the first call that
// needs it connects, and a lost connection is made again.
func New(settings map[string]string) (*Libvirt, error) {
	p := &Libvirt{pool: DefaultPool, poolDir: DefaultPoolDir, domainType: "qemu", stopTimeout: DefaultStopTimeout, readyTimeout: DefaultReadyTimeout}
	uri := DefaultURI
	for k, v := range settings {
		switch k {
		case "uri":
			if v != "" {
				uri = v
			}
		case "pool":
			if v != "" {
				p.pool = v
			}
		case "pool_dir":
			if v != "" && !path.IsAbs(v) {
				return nil, errdefs.Field("settings.pool_dir", "%q is not an absolute path on the libvirt host", v)
			}
			if v != "" {
				p.poolDir = v
			}
		case "domain_type":
			switch v {
			case "qemu", "kvm":
				p.domainType = v
			case "":
			default:
				return nil, errdefs.Field("settings.domain_type", "%q is not a domain type; use qemu (emulation, TCG) or kvm", v)
			}
		case "stop_timeout", "ready_timeout":
			t, err := time.ParseDuration(v)
			if err != nil || t < 0 {
				return nil, errdefs.Field("settings."+k, "%q is not a non-negative duration such as 30s", v)
			}
			if k == "stop_timeout" {
				p.stopTimeout = t
			} else {
				p.readyTimeout = t
			}
		default:
			return nil, errdefs.Field("settings."+k, "unknown libvirt provider setting; known: uri, pool, pool_dir, domain_type, stop_timeout, ready_timeout")
		}
	}
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return nil, errdefs.Field("settings.uri", "%q is not a libvirt URI such as qemu:///system, qemu+ssh://host/system or test:///default", uri)
	}
	p.uri = u
	p.connect = p.dial
	return p, nil
}

// Name is "libvirt".
func (p *Libvirt) Name() string { return "libvirt" }

// PullBootstrap says yes for a machine booted from a disk image, which
// cloud images are (they run cloud-init on the NoCloud seed), unless the
// template gives user data of its own; a kernel or ISO boot, or an image
// without cloud-init, is bootstrapped over SSH (bootstrap: push). The
// template's bootstrap: pull or push decides where it is set.
func (p *Libvirt) PullBootstrap(extra map[string]any) bool {
	if extra["user_data"] != nil {
		return false
	}
	switch how, _ := extra[provision.ExtraBootstrap].(string); how {
	case "push":
		return false
	case "pull":
		return true
	}
	kernel, _ := extra["kernel"].(string)
	iso, _ := extra["iso"].(string)
	return kernel == "" && iso == ""
}

// URI is the libvirt URI the provider connects to.
func (p *Libvirt) URI() string { return p.uri.String() }

// MachineArch is the arch a domain of this Extra gets: extra.arch, or the
// server's when absent (as Provision does); "" when extra.arch is not one
// the provider knows.
func (p *Libvirt) MachineArch(extra map[string]any) string {
	a, _ := extra["arch"].(string)
	arch, err := normArch(a)
	if err != nil {
		return ""
	}
	return arch
}

// Local reports whether the daemon, and so its domains, runs on this
// host: a URI with no host (qemu:///system, qemu:///session,
// qemu+unix:///system) or a loopback one (localhost, 127.0.0.1, ::1).
// It is the prefer-local policy's measure, not how to connect (local
// says that).
func (p *Libvirt) Local() bool {
	switch h := p.uri.Hostname(); h {
	case "", "localhost":
		return true
	default:
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
}

// Close drops the connection to the daemon.
func (p *Libvirt) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	c := p.conn
	p.conn = nil
	if !c.IsConnected() {
		return nil
	}
	return c.Disconnect()
}

// local says whether the daemon runs on this host (a unix socket), so
// that a port it forwards on 127.0.0.1 is ours to reach.
func (p *Libvirt) local() bool {
	scheme := strings.SplitN(p.uri.Scheme, "+", 2)
	if len(scheme) == 2 {
		return scheme[1] == "unix"
	}
	return p.uri.Host == ""
}

// dial connects to the daemon: a local one through its unix socket (the
// URI's socket parameter, the session daemon's for …:///session, else the
// system one), any other through go-libvirt's dialer for the transport.
func (p *Libvirt) dial() (client, error) {
	if !p.local() {
		return golibvirt.ConnectToURI(p.uri)
	}
	sock := p.uri.Query().Get("socket")
	if sock == "" {
		sock = defaultSocket
		if p.uri.Path == "/session" {
			dir := os.Getenv("XDG_RUNTIME_DIR")
			if dir == "" {
				home, _ := os.UserHomeDir()
				dir = filepath.Join(home, ".cache")
			}
			sock = filepath.Join(dir, "libvirt", "libvirt-sock")
		}
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(dialTimeout)))
	if err := l.ConnectToURI(golibvirt.RemoteURI(p.uri)); err != nil {
		return nil, fmt.Errorf("via %s: %w", sock, err)
	}
	return l, nil
}

// client returns the connection to the daemon, connecting first if there
// is none or it was lost.
func (p *Libvirt) client(ctx context.Context) (client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && p.conn.IsConnected() {
		return p.conn, nil
	}
	type result struct {
		c   client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := p.connect()
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("connect to libvirt at %s: %w", p.uri, classifyConnect(r.err))
		}
		p.conn = r.c
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Disconnect()
			}
		}()
		return nil, fmt.Errorf("connect to libvirt at %s: %w", p.uri, ctx.Err())
	}
}

// classifyConnect classes a failure to connect: unavailable unless libvirt
// itself said otherwise (a refused login, an unknown driver).
func classifyConnect(err error) error {
	err = classify(err)
	for _, c := range []error{errdefs.ErrPermission, errdefs.ErrInvalid, errdefs.ErrUnavailable} {
		if errors.Is(err, c) {
			return err
		}
	}
	return errdefs.Class(err, errdefs.ErrUnavailable)
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// Provision defines a domain for the machine, makes its volumes, starts
// it and, unless ready_timeout is 0, waits until its SSH server answers.
// On error it removes whatever it made.
//
// The domain is defined before its volumes are made, and lists them in
// its metadata, so that a crash at any point leaves a domain that Find
// lists and Destroy removes with its volumes.
func (p *Libvirt) Provision(ctx context.Context, spec provision.Spec) (provision.Deployment, error) {
	cfg, err := parseExtra(spec.Extra)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	if err := cfg.takeUserData(spec.UserData, spec.Extra); err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", spec.Name, err)
	}
	name := spec.NameOrRandom()
	if !validName.MatchString(name) || len(name) > 200 {
		return provision.Deployment{}, errdefs.Field("name", "%q cannot name a domain: use letters, digits, _ . - (starting with a letter or digit)", name)
	}
	if cfg.netMode == netUser && !p.local() {
		return provision.Deployment{}, errdefs.Field("extra.network", "user-mode networking forwards SSH on the libvirt host's 127.0.0.1, which nodemgr cannot reach on %s: name a libvirt network (extra.network)", p.uri.Host)
	}
	c, err := p.client(ctx)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}
	dep, err := p.provision(ctx, c, name, cfg, spec)
	if err != nil {
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", name, err)
	}
	return dep, nil
}

func (p *Libvirt) provision(ctx context.Context, c client, name string, cfg config, spec provision.Spec) (provision.Deployment, error) {
	if _, err := c.DomainLookupByName(name); err == nil {
		return provision.Deployment{}, errdefs.Conflict("a domain named %s exists already on %s", name, p.uri)
	} else if !isCode(err, golibvirt.ErrNoDomain) {
		return provision.Deployment{}, classify(err)
	}
	if cfg.netMode == netNetwork {
		if err := checkNetwork(c, cfg.network); err != nil {
			return provision.Deployment{}, err
		}
	}
	domainType := cfg.domainType
	if domainType == "" {
		domainType = p.domainType
	}
	uuid := newUUID()
	created := time.Now().UTC().Truncate(time.Second)

	var seed []byte
	if cfg.hasSeed() {
		host := cfg.hostname
		if host == "" {
			host = hostnameOf(name)
		}
		seed = nocloudSeed(uuid, host, cfg.userData, created)
	}
	lo, err := p.planStorage(c, name, cfg, seed)
	if err != nil {
		return provision.Deployment{}, err
	}

	labels := map[string]string{}
	maps.Copy(labels, spec.Labels)
	labels[LabelDeployment] = name
	labels[LabelTemplate] = spec.Template
	inst := &Instance{Created: created.Format(time.RFC3339)}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		inst.Labels = append(inst.Labels, Label{Key: k, Value: labels[k]})
	}
	for _, v := range lo.volumes {
		inst.Volumes = append(inst.Volumes, VolumeRef{Pool: lo.pool, Name: v.xml.Name})
	}
	if cfg.netMode == netUser {
		port := cfg.sshPort
		if port == 0 {
			if port, err = freePort(); err != nil {
				return provision.Deployment{}, fmt.Errorf("pick a port to forward SSH on: %w", err)
			}
		}
		inst.SSH = &SSHForward{Address: "127.0.0.1", Port: port}
	} else {
		inst.Network = cfg.network
	}
	ds := domainSpec{name: name, uuid: uuid, domainType: domainType, cfg: cfg, disks: lo.disks, instance: inst, mac: newMAC()}
	dx := domainXML(ds)

	dom, err := define(c, dx)
	if err != nil {
		return provision.Deployment{}, err
	}
	made := []VolumeRef{} // the volumes this call made, which a failure removes
	fail := func(err error) (provision.Deployment, error) {
		return provision.Deployment{}, provision.Undo(ctx, cleanupTimeout, err, "removing domain "+name, func(ctx context.Context) error {
			return p.remove(ctx, c, dom, made)
		})
	}
	if inst.SSH != nil {
		// Only now does libvirt's own PCI layout show which slot is free.
		doc, err := c.DomainGetXMLDesc(dom, 0)
		if err != nil {
			return fail(fmt.Errorf("read domain %s back: %w", name, classify(err)))
		}
		var defined DomainXML
		if err := unmarshalXML(doc, &defined); err != nil {
			return fail(fmt.Errorf("read domain %s back: %w", name, err))
		}
		if err := forwardSSH(&dx, defined, inst.SSH.Address, inst.SSH.Port); err != nil {
			return fail(err)
		}
		if _, err := define(c, dx); err != nil {
			return fail(err)
		}
	}

	pool, err := c.StoragePoolLookupByName(lo.pool)
	if err != nil {
		return fail(fmt.Errorf("storage pool %s: %w", lo.pool, classify(err)))
	}
	for _, v := range lo.volumes {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		doc, err := marshalXML(v.xml)
		if err != nil {
			return fail(err)
		}
		vol, err := c.StorageVolCreateXML(pool, doc, 0)
		if err != nil {
			return fail(fmt.Errorf("create volume %s in pool %s: %w", v.xml.Name, lo.pool, classify(err)))
		}
		made = append(made, VolumeRef{Pool: lo.pool, Name: v.xml.Name})
		if v.upload != nil {
			if err := c.StorageVolUpload(vol, bytes.NewReader(v.upload), 0, uint64(len(v.upload)), 0); err != nil {
				return fail(fmt.Errorf("write volume %s: %w", v.xml.Name, classify(err)))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := c.DomainCreate(dom); err != nil {
		return fail(fmt.Errorf("start domain: %w", classify(err)))
	}

	dep := provision.Deployment{
		Provider:   "libvirt",
		ResourceID: uuid,
		Name:       name,
		Template:   spec.Template,
		State:      provision.StateRunning,
		Address:    addressOf(c, dom, inst, ds.mac),
		Executors:  []string{CapExec, CapSFTP, CapRsync},
		Extra:      maps.Clone(spec.Extra),
		Labels:     labels,
		CreatedAt:  created,
	}
	// The ssh executor logs in as ssh_user: the template's user unless
	// the template says otherwise.
	if _, set := dep.Extra["ssh_user"]; !set && cfg.user != "" {
		if dep.Extra == nil {
			dep.Extra = map[string]any{}
		}
		dep.Extra["ssh_user"] = cfg.user
	}
	if p.readyTimeout > 0 {
		addr, err := p.waitReady(ctx, c, dom, inst, ds.mac, cfg.consoleLog)
		if err != nil {
			return fail(err)
		}
		dep.Address = addr
	}
	return dep, nil
}

// define defines (or redefines) a domain from its XML.
func define(c client, dx DomainXML) (golibvirt.Domain, error) {
	doc, err := marshalXML(dx)
	if err != nil {
		return golibvirt.Domain{}, err
	}
	dom, err := c.DomainDefineXML(doc)
	if err != nil {
		return golibvirt.Domain{}, fmt.Errorf("define domain %s: %w", dx.Name, classify(err))
	}
	return dom, nil
}

// checkNetwork refuses a libvirt network that does not exist or is not
// active, before anything is made.
func checkNetwork(c client, name string) error {
	n, err := c.NetworkLookupByName(name)
	if err != nil {
		if isCode(err, golibvirt.ErrNoNetwork) {
			return errdefs.NotFound("libvirt network %q (see virsh net-list --all)", name)
		}
		return fmt.Errorf("network %s: %w", name, classify(err))
	}
	if active, err := c.NetworkIsActive(n); err == nil && active == 0 {
		return errdefs.Conflict("libvirt network %s is not active (virsh net-start %s)", name, name)
	}
	return nil
}

// hostnameOf makes a machine name a host name.
func hostnameOf(name string) string {
	h := strings.Map(func(r rune) rune {
		if r == '_' || r == '.' {
			return '-'
		}
		return r
	}, name)
	h = strings.Trim(h, "-")
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-")
	}
	if h == "" {
		h = "nodemgr"
	}
	return h
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. QEMU binds it
// a moment later; another process could take it in between, in which case
// the domain fails to start and Provision says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Destroy stops the machine at once and removes it: the domain, its
// managed save image and NVRAM, and the volumes made for it. A machine
// that is gone already is not an error.
func (p *Libvirt) Destroy(ctx context.Context, dep provision.Deployment) error {
	c, dom, err := p.lookup(ctx, dep)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy %s: %w", dep.Name, err)
	}
	if err := p.remove(ctx, c, dom, nil); err != nil {
		return fmt.Errorf("destroy %s: %w", dep.Name, err)
	}
	return nil
}

// remove destroys and undefines a domain and deletes its volumes: those
// its metadata lists, or, when only is not nil, only those (what a failed
// Provision made). Volumes go before the domain, so that a crash in
// between leaves a domain that the next Destroy finds.
func (p *Libvirt) remove(ctx context.Context, c client, dom golibvirt.Domain, only []VolumeRef) error {
	dx, err := domainOf(c, dom)
	if isCode(err, golibvirt.ErrNoDomain) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read domain: %w", classify(err))
	}
	if err := c.DomainDestroy(dom); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) && !isCode(err, golibvirt.ErrNoDomain) {
		return fmt.Errorf("stop domain: %w", classify(err))
	}
	vols := only
	if vols == nil && dx.Metadata != nil && dx.Metadata.Instance != nil {
		vols = dx.Metadata.Instance.Volumes
	}
	for _, v := range vols {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := deleteVolume(c, v); err != nil {
			return err
		}
	}
	flags := golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata
	if dx.OS.NVRAM != nil || dx.OS.Loader != nil || dx.OS.Firmware == "efi" {
		flags |= golibvirt.DomainUndefineNvram
	}
	if err := c.DomainUndefineFlags(dom, flags); err != nil && !isCode(err, golibvirt.ErrNoDomain) {
		return fmt.Errorf("undefine domain: %w", classify(err))
	}
	return nil
}

func deleteVolume(c client, v VolumeRef) error {
	pool, err := c.StoragePoolLookupByName(v.Pool)
	if isCode(err, golibvirt.ErrNoStoragePool) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage pool %s: %w", v.Pool, classify(err))
	}
	vol, err := c.StorageVolLookupByName(pool, v.Name)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return nil
	}
	if err == nil {
		err = c.StorageVolDelete(vol, 0)
	}
	if err != nil && !isCode(err, golibvirt.ErrNoStorageVol) {
		return fmt.Errorf("delete volume %s from pool %s: %w", v.Name, v.Pool, classify(err))
	}
	return nil
}

// Find lists the machines this provider made on the daemon (domains with
// its metadata) that carry all the given labels (none: all of them),
// whatever their state. The orchestrator's sweep finds leaked machines by
// their owner label with it.
func (p *Libvirt) Find(ctx context.Context, labels map[string]string) ([]provision.Deployment, error) {
	c, err := p.client(ctx)
	if err != nil {
		return nil, fmt.Errorf("find domains: %w", err)
	}
	doms, _, err := c.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("find domains: %w", classify(err))
	}
	var out []provision.Deployment
	for _, dom := range doms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inst, err := instanceOf(c, dom)
		if isCode(err, golibvirt.ErrNoDomainMetadata) || isCode(err, golibvirt.ErrNoDomain) {
			continue // not ours, or gone since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("find domains: %s: %w", dom.Name, err)
		}
		got := inst.labels()
		if _, ours := got[LabelDeployment]; !ours {
			continue
		}
		match := true
		for k, v := range labels {
			if got[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		state, err := stateOf(c, dom)
		if isCode(err, golibvirt.ErrNoDomain) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("find domains: %s: %w", dom.Name, err)
		}
		dep := provision.Deployment{
			Provider:   "libvirt",
			ResourceID: formatUUID(dom.UUID),
			Name:       dom.Name,
			Template:   got[LabelTemplate],
			State:      state,
			Executors:  []string{CapExec, CapSFTP, CapRsync},
			Labels:     got,
		}
		if state == provision.StateRunning {
			dep.Address = addressOf(c, dom, inst, "")
		} else if inst.SSH != nil {
			dep.Address = net.JoinHostPort(inst.SSH.Address, strconv.Itoa(inst.SSH.Port))
		}
		if t, err := time.Parse(time.RFC3339, inst.Created); err == nil {
			dep.CreatedAt = t
		}
		out = append(out, dep)
	}
	slices.SortFunc(out, func(a, b provision.Deployment) int {
		return strings.Compare(a.Name+"\x00"+a.ResourceID, b.Name+"\x00"+b.ResourceID)
	})
	return out, nil
}

func (inst *Instance) labels() map[string]string {
	m := make(map[string]string, len(inst.Labels))
	for _, l := range inst.Labels {
		m[l.Key] = l.Value
	}
	return m
}

// instanceOf reads the provider's metadata element of a domain.
func instanceOf(c client, dom golibvirt.Domain) (*Instance, error) {
	doc, err := c.DomainGetMetadata(dom, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{Namespace}, golibvirt.DomainAffectCurrent)
	if err != nil {
		return nil, err
	}
	// libvirt gives the element back without its namespace.
	dec := xml.NewDecoder(strings.NewReader(doc))
	dec.DefaultSpace = Namespace
	var inst Instance
	if err := dec.Decode(&inst); err != nil {
		return nil, fmt.Errorf("read nodemgr metadata: %w", err)
	}
	return &inst, nil
}

// domainOf reads a domain's (inactive) definition.
func domainOf(c client, dom golibvirt.Domain) (DomainXML, error) {
	doc, err := c.DomainGetXMLDesc(dom, golibvirt.DomainXMLInactive)
	if err != nil {
		return DomainXML{}, err
	}
	var dx DomainXML
	if err := unmarshalXML(doc, &dx); err != nil {
		return DomainXML{}, fmt.Errorf("read domain XML: %w", err)
	}
	return dx, nil
}

// lookup finds a deployment's domain by its UUID; a missing one is an
// errdefs.ErrNotFound.
func (p *Libvirt) lookup(ctx context.Context, dep provision.Deployment) (client, golibvirt.Domain, error) {
	if dep.ResourceID == "" {
		return nil, golibvirt.Domain{}, errdefs.Field("resource_id", "deployment %s has no domain UUID", dep.Name)
	}
	uuid, err := parseUUID(dep.ResourceID)
	if err != nil {
		return nil, golibvirt.Domain{}, errdefs.Field("resource_id", "deployment %s: %v", dep.Name, err)
	}
	c, err := p.client(ctx)
	if err != nil {
		return nil, golibvirt.Domain{}, err
	}
	dom, err := c.DomainLookupByUUID(uuid)
	if isCode(err, golibvirt.ErrNoDomain) {
		return c, dom, errdefs.NotFound("domain %s", dep.ResourceID)
	}
	if err != nil {
		return c, dom, fmt.Errorf("look up domain %s: %w", dep.ResourceID, classify(err))
	}
	return c, dom, nil
}

var (
	_ provision.Provider      = (*Libvirt)(nil)
	_ provision.Lifecycle     = (*Libvirt)(nil)
	_ provision.StateReasoner = (*Libvirt)(nil)
	_ provision.Locality      = (*Libvirt)(nil)
	_ provision.Archer        = (*Libvirt)(nil)
	_ client                  = (*golibvirt.Libvirt)(nil)
)
