// Package cgroup parses the two files that say where a process's cgroups
// are: /proc/self/cgroup (its cgroup in each hierarchy) and
// /proc/self/mountinfo (where each cgroup hierarchy is mounted).
// internal/base/hw reads the limits set there; internal/node/proctree
// makes its groups there.
package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Membership is a line of /proc/self/cgroup ("8:pids:/user.slice"): the
// process's cgroup in one hierarchy. cgroup v2's unified hierarchy has ID
// "0" and no controllers.
type Membership struct {
	ID          string
	Controllers []string
	Path        string
}

// V2 says whether m is the process's place in the unified v2 hierarchy.
func (m Membership) V2() bool { return m.ID == "0" && len(m.Controllers) == 0 }

// ParseMemberships parses /proc/self/cgroup content; lines it cannot read
// are passed over.
func ParseMemberships(b []byte) []Membership {
	var ms []Membership
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		m := Membership{ID: f[0], Path: f[2]}
		if f[1] != "" {
			m.Controllers = strings.Split(f[1], ",")
		}
		ms = append(ms, m)
	}
	return ms
}

// Mount is a cgroup filesystem from /proc/self/mountinfo: Root is the
// cgroup it shows at Point.
type Mount struct {
	V2      bool
	Root    string
	Point   string
	Options []string // superblock options; v1 lists its controllers there
}

// ParseMountInfo returns the cgroup mounts in mountinfo content, in the
// order they are listed. A line is
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// with any number of optional fields before the "-".
func ParseMountInfo(b []byte) ([]Mount, error) {
	var ms []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20) // mount options can be long
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			if len(f) == 0 {
				continue
			}
			return nil, fmt.Errorf("parse mountinfo: bad line %q", sc.Text())
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		ms = append(ms, Mount{
			V2:      fstype == "cgroup2",
			Root:    unescapeMount(f[3]),
			Point:   unescapeMount(f[4]),
			Options: strings.Split(f[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return ms, nil
}

// unescapeMount undoes the octal escapes (\040 for a space) the kernel
// writes in mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
