// Package libvirttest gives tests a real libvirt daemon to work against:
// connections to libvirtd (its test driver, test+unix:///default, or
// QEMU, qemu:///system) that skip the test when the daemon is not
// reachable, or fail it when NODEMGR_REQUIRE_LIBVIRT=1 (as CI sets); a
// storage pool of the test's own; and, for tests that boot a real guest,
// a Debian kernel and an initramfs with an SSH server (see Guest).
//
// The test driver keeps its state in the daemon's memory for as long as a
// connection to it is open, shared by all connections: TestDriver's
// connection keeps it alive for the test, and names from Name keep tests
// (and test binaries) apart.
package libvirttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt"
)

// The test driver's URI and what it comes with.
const (
	TestURI     = "test+unix:///default"
	TestPool    = "default-pool"
	TestNetwork = "default"
)

// QEMUURI is the system QEMU driver.
const QEMUURI = "qemu:///system"

// LabelTest is the label Labels sets.
const LabelTest = "nodemgr.test"

// Socket is libvirtd's socket: $NODEMGR_LIBVIRT_SOCKET, else the system one.
func Socket() string {
	if s := os.Getenv("NODEMGR_LIBVIRT_SOCKET"); s != "" {
		return s
	}
	return "/var/run/libvirt/libvirt-sock"
}

// withSocket adds the socket parameter to a local URI when Socket is not
// the default.
func withSocket(uri string) string {
	if os.Getenv("NODEMGR_LIBVIRT_SOCKET") == "" {
		return uri
	}
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	q := u.Query()
	q.Set("socket", Socket())
	u.RawQuery = q.Encode()
	return u.String()
}

// Unavailable skips the test, or fails it when NODEMGR_REQUIRE_LIBVIRT=1.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("NODEMGR_REQUIRE_LIBVIRT") == "1" {
		t.Fatalf("%s (NODEMGR_REQUIRE_LIBVIRT=1)", msg)
	}
	t.Skipf("%s; set NODEMGR_REQUIRE_LIBVIRT=1 to fail instead", msg)
}

// Connect connects to the daemon's driver for uri (a local one: the
// connection goes through Socket) and closes the connection when the test
// ends. A daemon that cannot be reached is Unavailable.
func Connect(t testing.TB, uri string) *golibvirt.Libvirt {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatalf("libvirt URI %q: %v", uri, err)
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(Socket()), dialers.WithLocalTimeout(5*time.Second)))
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(golibvirt.RemoteURI(u)) }()
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		err = fmt.Errorf("no answer in 15s")
	}
	if err != nil {
		Unavailable(t, "no libvirt daemon at %s for %s (start virtlogd -d and libvirtd -d): %v", Socket(), uri, err)
	}
	t.Cleanup(func() { l.Disconnect() })
	return l
}

// TestDriver connects to the daemon's test driver. The connection keeps
// the driver's state alive while the test runs.
func TestDriver(t testing.TB) *golibvirt.Libvirt {
	t.Helper()
	return Connect(t, TestURI)
}

// TestSettings are provider settings for the test driver: its pool, no
// wait for an SSH server (its guests run nothing), a short stop grace.
func TestSettings() map[string]string {
	return map[string]string{"uri": withSocket(TestURI), "pool": TestPool, "ready_timeout": "0", "stop_timeout": "2s"}
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Name is a machine name unique to this test and run: the test's name,
// cut short, and a random suffix.
func Name(t testing.TB) string {
	n := strings.Trim(unsafeChars.ReplaceAllString(t.Name(), "-"), "-.")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	b := make([]byte, 4)
	rand.Read(b)
	return strings.TrimLeft(n, "-._") + "-" + hex.EncodeToString(b)
}

// Labels are labels unique to this test, for Find.
func Labels(t testing.TB) map[string]string {
	b := make([]byte, 6)
	rand.Read(b)
	return map[string]string{LabelTest: hex.EncodeToString(b)}
}

// Context is a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// CreateVolume makes a volume in a pool of l's driver from its XML and
// deletes it when the test ends.
func CreateVolume(t testing.TB, l *golibvirt.Libvirt, pool, doc string) golibvirt.StorageVol {
	t.Helper()
	p, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		t.Fatalf("storage pool %s: %v", pool, err)
	}
	v, err := l.StorageVolCreateXML(p, doc, 0)
	if err != nil {
		t.Fatalf("create volume in %s: %v", pool, err)
	}
	t.Cleanup(func() { l.StorageVolDelete(v, 0) })
	return v
}

// VolumeExists says whether pool holds a volume of that name.
func VolumeExists(t testing.TB, l *golibvirt.Libvirt, pool, name string) bool {
	t.Helper()
	p, err := l.StoragePoolLookupByName(pool)
	if err != nil {
		t.Fatalf("storage pool %s: %v", pool, err)
	}
	_, err = l.StorageVolLookupByName(p, name)
	return err == nil
}

// Domains lists the domains of l's driver whose nodemgr metadata carries
// all the labels, as "name state", read with l rather than the provider.
func Domains(t testing.TB, l *golibvirt.Libvirt, labels map[string]string) []string {
	t.Helper()
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatalf("list domains: %v", err)
	}
	var out []string
	for _, d := range doms {
		doc, err := l.DomainGetMetadata(d, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{libvirt.Namespace}, golibvirt.DomainAffectCurrent)
		if err != nil {
			continue
		}
		dec := xml.NewDecoder(strings.NewReader(doc))
		dec.DefaultSpace = libvirt.Namespace
		var inst libvirt.Instance
		if dec.Decode(&inst) != nil {
			continue
		}
		got := map[string]string{}
		for _, l := range inst.Labels {
			got[l.Key] = l.Value
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			st, _, _ := l.DomainGetState(d, 0)
			out = append(out, fmt.Sprintf("%s %s", d.Name, golibvirt.DomainState(st)))
		}
	}
	return out
}
