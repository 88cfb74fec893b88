package libvirt

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

func TestParseExtra(t *testing.T) {
	host, _ := normArch("")
	base := func(c config) config {
		if c.arch == "" {
			c.arch = host
		}
		if c.vcpus == 0 {
			c.vcpus = defaultCPUs
		}
		if c.memoryMiB == 0 {
			c.memoryMiB = defaultMemoryMiB
		}
		if c.netMode == "" {
			c.netMode = netUser
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  config
	}{
		{"a base image, defaults", map[string]any{"base_image": "debian-12.qcow2"},
			base(config{boot: bootDisk, baseImage: "debian-12.qcow2"})},
		{"seed 000's template and mapping", map[string]any{
			"name": "ubuntu-worker-small", "cpu": 2, "memoryMB": 1024.0, "diskGB": 3.0, "image": "ubuntu:24.04",
			"user": "ubuntu", "network": "default", "iso": "ubuntu-24.04.3-live-server-amd64.iso", "image_type": "iso",
		}, base(config{vcpus: 2, memoryMiB: 1024, diskBytes: 3 << 30, boot: bootISO, iso: "ubuntu-24.04.3-live-server-amd64.iso",
			netMode: netNetwork, network: "default", user: "ubuntu"})},
		{"kernel boot", map[string]any{"kernel": "/k/vmlinuz", "initrd": "/k/initrd", "cmdline": "console=ttyS0", "diskMB": 512},
			base(config{boot: bootKernel, kernel: "/k/vmlinuz", initrd: "/k/initrd", cmdline: "console=ttyS0", diskBytes: 512 << 20})},
		{"diskGB wins over diskMB", map[string]any{"base_image": "b", "diskGB": "1.5", "diskMB": 100},
			base(config{boot: bootDisk, baseImage: "b", diskBytes: 3 << 29})},
		{"json numbers", map[string]any{"base_image": "b", "cpu": json.Number("4"), "memoryMB": json.Number("2048")},
			base(config{boot: bootDisk, baseImage: "b", vcpus: 4, memoryMiB: 2048})},
		{"arch names", map[string]any{"base_image": "b", "arch": "arm64"},
			base(config{boot: bootDisk, baseImage: "b", arch: "aarch64"})},
		{"amd64 is x86_64", map[string]any{"base_image": "b", "arch": "amd64"},
			base(config{boot: bootDisk, baseImage: "b", arch: "x86_64"})},
		{"user-mode networking with a port", map[string]any{"base_image": "b", "network_mode": "user", "ssh_port": 2222},
			base(config{boot: bootDisk, baseImage: "b", netMode: netUser, sshPort: 2222})},
		{"user data as text", map[string]any{"base_image": "b", "user_data": "#cloud-config\n"},
			base(config{boot: bootDisk, baseImage: "b", userData: "#cloud-config\n"})},
		{"user data as a map", map[string]any{"base_image": "b", "user_data": map[string]any{"packages": []any{"rsync"}}},
			base(config{boot: bootDisk, baseImage: "b", userData: "#cloud-config\npackages:\n    - rsync\n"})},
		{"keys for the template's user", map[string]any{"base_image": "b", "user": "dev", "ssh_authorized_keys": []any{"ssh-ed25519 AAAA k"}},
			base(config{boot: bootDisk, baseImage: "b", user: "dev", userData: "#cloud-config\nusers:\n    - default\n    - name: dev\n      shell: /bin/sh\n      ssh_authorized_keys:\n        - ssh-ed25519 AAAA k\n      sudo: ALL=(ALL) NOPASSWD:ALL\n"})},
		{"the rest", map[string]any{"base_image": "/var/lib/images/b.qcow2", "pool": "fast", "domain_type": "kvm", "machine": "q35",
			"hostname": "web-1", "console_log": "/var/log/nm/web-1.log", "ami": "ignored", "env": []any{"ignored"}},
			base(config{boot: bootDisk, baseImage: "/var/lib/images/b.qcow2", pool: "fast", domainType: "kvm", machine: "q35",
				hostname: "web-1", consoleLog: "/var/log/nm/web-1.log"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			provisiontest.CheckParsed(t, parseExtra, tc.extra, tc.want, cmp.AllowUnexported(config{}))
		})
	}
}

func TestParseExtraRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
		field string
		says  string
	}{
		{"no boot source", map[string]any{"image": "ubuntu:24.04"}, "extra.image_type", "needs a boot source"},
		{"unknown image type", map[string]any{"image_type": "vmdk", "base_image": "b"}, "extra.image_type", "not an image type"},
		{"image type without its key", map[string]any{"image_type": "iso", "base_image": "b"}, "extra.iso", "needs iso"},
		{"relative kernel", map[string]any{"kernel": "vmlinuz"}, "extra.kernel", "absolute path"},
		{"cmdline without kernel", map[string]any{"base_image": "b", "cmdline": "quiet"}, "extra.cmdline", "image_type kernel"},
		{"a path that is not absolute", map[string]any{"base_image": "images/b.qcow2"}, "extra.base_image", "neither a volume name"},
		{"fractional CPUs", map[string]any{"base_image": "b", "cpu": 1.5}, "extra.cpu", "whole number"},
		{"no CPUs", map[string]any{"base_image": "b", "cpu": 0}, "extra.cpu", "whole number"},
		{"memory as a list", map[string]any{"base_image": "b", "memoryMB": []any{1}}, "extra.memoryMB", "want a number"},
		{"negative disk", map[string]any{"base_image": "b", "diskGB": -1}, "extra.diskGB", "out of range"},
		{"unknown arch", map[string]any{"base_image": "b", "arch": "riscv64"}, "extra.arch", "x86_64"},
		{"unknown domain type", map[string]any{"base_image": "b", "domain_type": "xen"}, "extra.domain_type", "qemu"},
		{"network and user mode", map[string]any{"base_image": "b", "network": "default", "network_mode": "user"}, "extra.network", "exclude"},
		{"network mode without a network", map[string]any{"base_image": "b", "network_mode": "network"}, "extra.network", "needs a network"},
		{"unknown network mode", map[string]any{"base_image": "b", "network_mode": "bridge"}, "extra.network_mode", "not a network mode"},
		{"ssh port on a network", map[string]any{"base_image": "b", "network": "default", "ssh_port": 2222}, "extra.ssh_port", "only user-mode"},
		{"ssh port out of range", map[string]any{"base_image": "b", "ssh_port": 70000}, "extra.ssh_port", "whole number"},
		{"user data and keys", map[string]any{"base_image": "b", "user_data": "x", "ssh_authorized_keys": "k"}, "extra.ssh_authorized_keys", "put the keys in it"},
		{"user data as a number", map[string]any{"base_image": "b", "user_data": 1}, "extra.user_data", "want text or a map"},
		{"keys as numbers", map[string]any{"base_image": "b", "ssh_authorized_keys": []any{1}}, "extra.ssh_authorized_keys[0]", "want a string"},
		{"relative console log", map[string]any{"base_image": "b", "console_log": "c.log"}, "extra.console_log", "absolute"},
		{"bad hostname", map[string]any{"base_image": "b", "hostname": "a_b"}, "extra.hostname", "not a host name"},
		{"pool as a number", map[string]any{"base_image": "b", "pool": 1}, "extra.pool", "want a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseExtra(tc.extra)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("parseExtra(%v) = %v, want a field error on %s saying %q", tc.extra, err, tc.field, tc.says)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("parseExtra(%v) = %v, want an ErrInvalid", tc.extra, err)
			}
		})
	}
}

func TestArchDefaultsToTheServers(t *testing.T) {
	got, err := normArch("")
	want := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if want == "" {
		if err == nil {
			t.Fatalf("normArch(\"\") on %s = %q, want an error", runtime.GOARCH, got)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("normArch(\"\") on %s = %q, %v, want %q", runtime.GOARCH, got, err, want)
	}
}

// A machine booted from a disk image (a cloud image) takes nodemgr's
// bootstrap user data; a kernel or ISO boot, a template with user data of
// its own, or bootstrap: push does not. The template's keys are added to
// the user data it takes.
func TestPullBootstrapUserData(t *testing.T) {
	p := &Libvirt{}
	for _, tc := range []struct {
		extra map[string]any
		want  bool
	}{
		{map[string]any{"base_image": "/img/debian.qcow2"}, true},
		{map[string]any{"base_image": "/img/debian.qcow2", "bootstrap": "push"}, false},
		{map[string]any{"base_image": "/img/debian.qcow2", "user_data": "#cloud-config\n"}, false},
		{map[string]any{"kernel": "/k", "initrd": "/i"}, false},
		{map[string]any{"kernel": "/k", "initrd": "/i", "bootstrap": "pull"}, true},
		{map[string]any{"iso": "/x.iso"}, false},
	} {
		if got := p.PullBootstrap(tc.extra); got != tc.want {
			t.Errorf("PullBootstrap(%v) = %v, want %v", tc.extra, got, tc.want)
		}
	}
	extra := map[string]any{"base_image": "/img/debian.qcow2", "user": "debian", "ssh_authorized_keys": []any{"ssh-ed25519 AAAA me"}}
	c, err := parseExtra(extra)
	if err != nil {
		t.Fatal(err)
	}
	ours := "#cloud-config\nruncmd:\n- [/bin/sh, /opt/nodemgr/bootstrap.sh]\n"
	if err := c.takeUserData(ours, extra); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#cloud-config\n", "/opt/nodemgr/bootstrap.sh", "name: debian", "ssh-ed25519 AAAA me"} {
		if !strings.Contains(c.userData, want) {
			t.Errorf("user data has no %q:\n%s", want, c.userData)
		}
	}
	if _, err := parseExtra(map[string]any{"base_image": "/img/x.qcow2", "bootstrap": "ssh"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bootstrap: ssh = %v; want a field error", err)
	}
}
