package libvirt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf16"
)

// seedLabel is the volume label cloud-init's NoCloud data source looks for.
const seedLabel = "cidata"

// nocloudSeed is the NoCloud seed of a machine: a small ISO 9660 image
// labelled cidata holding meta-data and user-data.
func nocloudSeed(instanceID, hostname, userData string, now time.Time) []byte {
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", instanceID, hostname)
	return isoImage(seedLabel, map[string][]byte{
		"meta-data": []byte(meta),
		"user-data": []byte(userData),
	}, now)
}

const sector = 2048

// isoImage writes an ISO 9660 image with the files in its root directory,
// readable by any ISO 9660 reader. A Joliet directory carries the names as
// they are (lowercase, with dashes); the primary one carries them as
// ISO 9660's d-characters allow (USER_DATA.;1).
//
// Layout, in 2 KiB sectors: 0-15 system area, 16 primary volume
// descriptor, 17 Joliet supplementary descriptor, 18 terminator, 19-22
// the path tables (L and M, primary and Joliet), 23 the primary root
// directory, 24 the Joliet root directory, 25… the files.
func isoImage(label string, files map[string][]byte, now time.Time) []byte {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	const (
		lPath, mPath, jlPath, jmPath = 19, 20, 21, 22
		rootPrimary, rootJoliet      = 23, 24
		firstFile                    = 25
	)
	extents := make([]uint32, len(names))
	next := uint32(firstFile)
	for i, n := range names {
		extents[i] = next
		next += uint32((len(files[n]) + sector - 1) / sector)
	}
	total := next

	img := make([]byte, int(total)*sector)
	at := func(s uint32) []byte { return img[int(s)*sector : int(s+1)*sector] }

	dir := func(joliet bool) []byte {
		var b bytes.Buffer
		self := uint32(rootPrimary)
		if joliet {
			self = rootJoliet
		}
		b.Write(dirRecord([]byte{0}, self, sector, true, now))
		b.Write(dirRecord([]byte{1}, self, sector, true, now))
		for i, n := range names {
			id := []byte(primaryName(n))
			if joliet {
				id = ucs2(n)
			}
			b.Write(dirRecord(id, extents[i], uint32(len(files[n])), false, now))
		}
		return b.Bytes()
	}
	copy(at(rootPrimary), dir(false))
	copy(at(rootJoliet), dir(true))

	pathTable := func(s uint32, root uint32, big bool) {
		p := at(s)
		p[0] = 1 // identifier length: the root's is one zero byte
		if big {
			binary.BigEndian.PutUint32(p[2:], root)
			binary.BigEndian.PutUint16(p[6:], 1)
		} else {
			binary.LittleEndian.PutUint32(p[2:], root)
			binary.LittleEndian.PutUint16(p[6:], 1)
		}
	}
	pathTable(lPath, rootPrimary, false)
	pathTable(mPath, rootPrimary, true)
	pathTable(jlPath, rootJoliet, false)
	pathTable(jmPath, rootJoliet, true)

	volumeDescriptor(at(16), 1, label, total, lPath, mPath, rootPrimary, now)
	volumeDescriptor(at(17), 2, label, total, jlPath, jmPath, rootJoliet, now)
	term := at(18)
	term[0] = 255
	copy(term[1:], "CD001")
	term[6] = 1

	for i, n := range names {
		copy(img[int(extents[i])*sector:], files[n])
	}
	return img
}

// volumeDescriptor fills a primary (kind 1) or Joliet supplementary (kind
// 2) volume descriptor (ECMA-119 8.4, Joliet's escape sequence %/E for
// UCS-2 level 3).
func volumeDescriptor(d []byte, kind byte, label string, total, lPath, mPath, root uint32, now time.Time) {
	d[0] = kind
	copy(d[1:], "CD001")
	d[6] = 1
	text := func(off, n int, s string) {
		if kind == 2 {
			u := ucs2(s)
			for i := 0; i < n; i += 2 {
				if i+1 < len(u) {
					d[off+i], d[off+i+1] = u[i], u[i+1]
				} else {
					d[off+i], d[off+i+1] = 0, ' '
				}
			}
			return
		}
		copy(d[off:off+n], fmt.Sprintf("%-*s", n, s))
	}
	text(8, 32, "LINUX")
	text(40, 32, label)
	both32(d[80:], total)
	if kind == 2 {
		copy(d[88:], "%/E")
	}
	both16(d[120:], 1) // volume set size
	both16(d[124:], 1) // volume sequence number
	both16(d[128:], sector)
	both32(d[132:], 10) // path table size: the root's record alone
	binary.LittleEndian.PutUint32(d[140:], lPath)
	binary.BigEndian.PutUint32(d[148:], mPath)
	copy(d[156:], dirRecord([]byte{0}, root, sector, true, now))
	text(190, 128, "")
	text(318, 128, "")
	text(446, 128, "")
	text(574, 128, "NODEMGR")
	text(702, 37, "")
	text(739, 37, "")
	text(776, 37, "")
	stamp := []byte(now.UTC().Format("20060102150405") + "00\x00")
	copy(d[813:], stamp)
	copy(d[830:], stamp)
	copy(d[847:], "0000000000000000\x00")
	copy(d[864:], stamp)
	d[881] = 1 // file structure version
}

// dirRecord is a directory record (ECMA-119 9.1).
func dirRecord(id []byte, extent, size uint32, isDir bool, now time.Time) []byte {
	n := 33 + len(id)
	if n%2 == 1 {
		n++
	}
	r := make([]byte, n)
	r[0] = byte(n)
	both32(r[2:], extent)
	both32(r[10:], size)
	t := now.UTC()
	r[18], r[19], r[20] = byte(t.Year()-1900), byte(t.Month()), byte(t.Day())
	r[21], r[22], r[23] = byte(t.Hour()), byte(t.Minute()), byte(t.Second())
	if isDir {
		r[25] = 2
	}
	both16(r[28:], 1)
	r[32] = byte(len(id))
	copy(r[33:], id)
	return r
}

// primaryName is name in ISO 9660's d-characters, with a version.
func primaryName(name string) string {
	up := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, name)
	return up + ".;1"
}

func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.BigEndian.PutUint16(b[2*i:], c)
	}
	return b
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}
