package libvirt

import (
	"fmt"
	"path"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// DefaultPoolDir is where the provider makes its storage pool when the
// daemon has none by that name: the directory of the "default" pool that
// virt-install and virt-manager make.
const DefaultPoolDir = "/var/lib/libvirt/images"

// storagePool finds a storage pool, running. The provider's own pool (the
// pool setting, "default" unless set) is made when missing and started
// when stopped, as virt-manager does for "default": a freshly installed
// libvirtd has none, and a newcomer's first machine should not fail on
// it. A pool a template names (extra.pool) is its author's: one missing
// or stopped is refused with the virsh commands that fix it.
func (p *Libvirt) storagePool(c client, name string) (golibvirt.StoragePool, error) {
	own := name == p.pool
	pool, err := c.StoragePoolLookupByName(name)
	switch {
	case isCode(err, golibvirt.ErrNoStoragePool) && own:
		return p.makePool(c)
	case isCode(err, golibvirt.ErrNoStoragePool):
		return pool, errdefs.NotFound("storage pool %q (make it: %s; or name one that virsh pool-list --all lists in extra.pool or the pool setting)",
			name, p.virshPool(name, "/var/lib/libvirt/"+name))
	case err != nil:
		return pool, fmt.Errorf("storage pool %s: %w", name, classify(err))
	}
	active, err := c.StoragePoolIsActive(pool)
	if err != nil {
		return pool, fmt.Errorf("storage pool %s: %w", name, classify(err))
	}
	if active == 1 {
		return pool, nil
	}
	if !own {
		return pool, errdefs.Conflict("storage pool %s is not active (%s)", name, p.virsh("pool-start", name))
	}
	if err := c.StoragePoolCreate(pool, 0); err != nil {
		return pool, fmt.Errorf("start storage pool %s (%s by hand): %w", name, p.virsh("pool-start", name), classify(err))
	}
	return pool, nil
}

// makePool makes the provider's pool: a directory pool at the pool_dir
// setting, built (the directory made), started, and started with the
// daemon from now on. A pool another server defined meanwhile is taken.
func (p *Libvirt) makePool(c client) (golibvirt.StoragePool, error) {
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	name, dir := p.pool, p.poolDir
	if pool, err := c.StoragePoolLookupByName(name); err == nil {
		return pool, nil
	}
	doc, err := marshalXML(PoolXML{Type: "dir", Name: name, Target: &PoolTarget{Path: dir}})
	if err != nil {
		return golibvirt.StoragePool{}, err
	}
	failed := func(step string, err error) (golibvirt.StoragePool, error) {
		return golibvirt.StoragePool{}, fmt.Errorf("storage pool %q is missing and making it failed at %s: %w; make it by hand: %s",
			name, step, classify(err), p.virshPool(name, dir))
	}
	pool, err := c.StoragePoolDefineXML(doc, 0)
	if err != nil {
		if again, lerr := c.StoragePoolLookupByName(name); lerr == nil {
			return again, nil
		}
		return failed("pool-define", err)
	}
	if err := c.StoragePoolBuild(pool, 0); err != nil {
		c.StoragePoolUndefine(pool)
		return failed("pool-build", err)
	}
	if err := c.StoragePoolCreate(pool, 0); err != nil {
		c.StoragePoolUndefine(pool)
		return failed("pool-start", err)
	}
	if err := c.StoragePoolSetAutostart(pool, 1); err != nil {
		return failed("pool-autostart", err)
	}
	return pool, nil
}

// virshPool is the virsh commands that make a directory pool.
func (p *Libvirt) virshPool(name, dir string) string {
	return strings.Join([]string{
		p.virsh("pool-define-as", name, "dir", "--target", path.Clean(dir)),
		p.virsh("pool-build", name),
		p.virsh("pool-start", name),
		p.virsh("pool-autostart", name),
	}, "; ")
}

// virsh is a virsh command line against the provider's daemon.
func (p *Libvirt) virsh(args ...string) string {
	return "virsh -c " + p.uri.String() + " " + strings.Join(args, " ")
}
