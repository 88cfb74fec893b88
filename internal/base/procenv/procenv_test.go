package procenv

import (
	"slices"
	"testing"
)

func TestBase(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"kept and dropped",
			map[string]string{"PATH": "/bin", "HOME": "/home/a", "LANG": "C.UTF-8", "TZ": "UTC",
				"NODEMGR_JOIN_TOKEN": "nmj_x", "NODEMGR_LOCAL_API_TOKEN": "y", "NODEMGR_TOKEN": "nmu_z", "FOO": "bar", "AWS_SECRET_ACCESS_KEY": "k"},
			[]string{"PATH=/bin", "HOME=/home/a", "LANG=C.UTF-8", "TZ=UTC"}},
		{"unset ones are left out", map[string]string{"PATH": "/bin"}, []string{"PATH=/bin"}},
		{"no PATH: a default one", map[string]string{"HOME": "/root"}, []string{"PATH=" + DefaultPath, "HOME=/root"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Base(func(k string) string { return tc.env[k] })
			if !slices.Equal(got, tc.want) {
				t.Errorf("Base(%v) = %q, want %q", tc.env, got, tc.want)
			}
		})
	}
}
