package cgroup

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMountInfo(t *testing.T) {
	in := "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"40 31 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,relatime master:3 shared:9 - cgroup cgroup rw,cpu,cpuacct\n" +
		`41 31 0:38 /a\040b /mnt/cgroup\040two rw - cgroup2 none rw` + "\n"
	want := []Mount{
		{Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", Options: []string{"rw", "cpu", "cpuacct"}},
		{V2: true, Root: "/a b", Point: "/mnt/cgroup two", Options: []string{"rw"}},
	}
	got, err := ParseMountInfo([]byte(in))
	if err != nil {
		t.Fatalf("ParseMountInfo(%q) = %v", in, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseMountInfo(%q) mismatch (-want +got):\n%s", in, diff)
	}
	if _, err := ParseMountInfo([]byte("30 20 0:30 / /sys/fs/cgroup\n")); err == nil || !strings.Contains(err.Error(), "parse mountinfo: bad line") {
		t.Errorf("ParseMountInfo(a line without its fields) = %v, want a bad line error", err)
	}
}

func TestParseMemberships(t *testing.T) {
	in := "12:pids:/user.slice\n4:cpu,cpuacct:/a:b\n0::/\nnot a line\n"
	want := []Membership{
		{ID: "12", Controllers: []string{"pids"}, Path: "/user.slice"},
		{ID: "4", Controllers: []string{"cpu", "cpuacct"}, Path: "/a:b"},
		{ID: "0", Path: "/"},
	}
	got := ParseMemberships([]byte(in))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseMemberships(%q) mismatch (-want +got):\n%s", in, diff)
	}
	if !got[2].V2() || got[0].V2() {
		t.Errorf("V2() = %v, %v for %+v, %+v, want false, true", got[0].V2(), got[2].V2(), got[0], got[2])
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011end`:    "/tab\tend",
		`/back\134slash`: `/back\slash`,
		`/short\04`:      `/short\04`,
		`/not\999octal`:  `/not\999octal`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
