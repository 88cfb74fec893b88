package libvirt

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/google/go-cmp/cmp"
)

// readISO reads the root directory of an ISO 9660 image through the
// descriptor of the given kind (1 primary, 2 Joliet): the label and the
// files by name.
func readISO(t *testing.T, img []byte, kind byte) (string, map[string]string) {
	t.Helper()
	if len(img)%sector != 0 {
		t.Fatalf("image is %d bytes, not whole sectors", len(img))
	}
	for s := 16; ; s++ {
		d := img[s*sector : (s+1)*sector]
		if string(d[1:6]) != "CD001" {
			t.Fatalf("sector %d is no volume descriptor", s)
		}
		if d[0] == 255 {
			t.Fatalf("no descriptor of kind %d", kind)
		}
		if d[0] != kind {
			continue
		}
		if kind == 2 && string(d[88:91]) != "%/E" {
			t.Fatalf("Joliet descriptor has escape %q", d[88:91])
		}
		if got := binary.LittleEndian.Uint32(d[80:]); int(got)*sector != len(img) {
			t.Errorf("volume space size %d sectors, image has %d", got, len(img)/sector)
		}
		name := func(b []byte) string {
			if kind == 1 {
				return strings.TrimRight(string(b), " ")
			}
			u := make([]uint16, len(b)/2)
			for i := range u {
				u[i] = binary.BigEndian.Uint16(b[2*i:])
			}
			return strings.TrimRight(string(utf16.Decode(u)), " ")
		}
		label := name(d[40:72])
		root := d[156:]
		ext, size := binary.LittleEndian.Uint32(root[2:]), binary.LittleEndian.Uint32(root[10:])
		if binary.BigEndian.Uint32(root[6:]) != ext {
			t.Errorf("root extent's big-endian copy differs")
		}
		dir := img[ext*sector : ext*sector+size]
		files := map[string]string{}
		for off := 0; off < len(dir) && dir[off] != 0; off += int(dir[off]) {
			r := dir[off:]
			id := r[33 : 33+int(r[32])]
			if r[25]&2 != 0 {
				continue // . and ..
			}
			fe, fs := binary.LittleEndian.Uint32(r[2:]), binary.LittleEndian.Uint32(r[10:])
			files[name(id)] = string(img[fe*sector : fe*sector+fs])
		}
		return label, files
	}
}

func TestNoCloudSeed(t *testing.T) {
	img := nocloudSeed("iid-1", "web-1", "#cloud-config\nruncmd: [touch, /x]\n", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	label, files := readISO(t, img, 2)
	if label != "cidata" {
		t.Errorf("Joliet label = %q, want cidata", label)
	}
	want := map[string]string{
		"meta-data": "instance-id: iid-1\nlocal-hostname: web-1\n",
		"user-data": "#cloud-config\nruncmd: [touch, /x]\n",
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("Joliet files (-want +got):\n%s", diff)
	}
	label, files = readISO(t, img, 1)
	if label != "cidata" {
		t.Errorf("primary label = %q, want cidata", label)
	}
	want = map[string]string{"META_DATA.;1": want["meta-data"], "USER_DATA.;1": want["user-data"]}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("primary files (-want +got):\n%s", diff)
	}

	// blkid (util-linux) must see what cloud-init looks for.
	if _, err := exec.LookPath("blkid"); err != nil {
		t.Skip("no blkid to check the label with")
	}
	f := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(f, img, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("blkid", "-p", "-o", "export", f).Output()
	if err != nil {
		t.Fatalf("blkid %s: %v", f, err)
	}
	for _, kv := range []string{"TYPE=iso9660", "LABEL=cidata"} {
		if !strings.Contains(string(out), kv+"\n") {
			t.Errorf("blkid says %q, want %s", out, kv)
		}
	}
}

func TestISOWithManyFiles(t *testing.T) {
	files := map[string][]byte{"network-config": []byte(strings.Repeat("x", 5000)), "a": nil, "vendor-data": []byte("v")}
	img := isoImage("cidata", files, time.Unix(0, 0))
	_, got := readISO(t, img, 2)
	want := map[string]string{"network-config": string(files["network-config"]), "a": "", "vendor-data": "v"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}
