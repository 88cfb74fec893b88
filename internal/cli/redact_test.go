package cli

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		secret   bool
	}{
		{"postgres://nodemgr:hunter2@db/nodemgr", "postgres://nodemgr:xxxxx@db/nodemgr", true},
		{"postgres://nodemgr@db/nodemgr?password=hunter2", "postgres://nodemgr@db/nodemgr?password=xxxxx", true},
		{"postgres://db/nodemgr?sslmode=disable&PASSWORD=hunter2&application_name=x", "postgres://db/nodemgr?sslmode=disable&PASSWORD=xxxxx&application_name=x", true},
		{"postgres://db/nodemgr?sslpassword=hunter2", "postgres://db/nodemgr?sslpassword=xxxxx", true},
		{"postgres://db/nodemgr?pass%77ord=hunter2", "postgres://db/nodemgr?pass%77ord=xxxxx", true}, // escaped key
		{"postgres://u:hunter2@db/x?password=hunter3", "postgres://u:xxxxx@db/x?password=xxxxx", true},
		{"postgres://db/nodemgr?sslmode=disable", "postgres://db/nodemgr?sslmode=disable", false},
		{"host=db user=nodemgr password=hunter2 dbname=nodemgr", "host=db user=nodemgr password=xxxxx dbname=nodemgr", true},
		{"host=db password = hunter2", "host=db password = xxxxx", true},
		{"host=db password='hunter 2' dbname=x", "host=db password=xxxxx dbname=x", true},
		{`host=db password='it\'s secret' dbname=x`, "host=db password=xxxxx dbname=x", true},
		{"host=db sslpassword=hunter2", "host=db sslpassword=xxxxx", true},
		{"host=db user=nodemgr", "host=db user=nodemgr", false},
		{"/var/lib/nodemgr/server/nodemgr.db", "/var/lib/nodemgr/server/nodemgr.db", false},
		{"", "", false},
	} {
		got := redactURL(tc.in)
		if got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "hunter") {
			t.Errorf("redactURL(%q) = %q shows the password", tc.in, got)
		}
		if h := holdsPassword(tc.in); h != tc.secret {
			t.Errorf("holdsPassword(%q) = %v, want %v", tc.in, h, tc.secret)
		}
	}
}

// TestPrintConfigRedactsDatabasePasswords is the audit's --print-config
// that showed ?password= in --db and all of --db-listen-url.
func TestPrintConfigRedactsDatabasePasswords(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want map[string]string
	}{
		{"flags", []string{"--db", "postgres://nodemgr@db:6432/nodemgr?password=hunter2", "--db-listen-url", "postgres://nodemgr:hunter3@db:5432/nodemgr"}, nil,
			map[string]string{"db": "postgres://nodemgr@db:6432/nodemgr?password=xxxxx", "db_listen_url": "postgres://nodemgr:xxxxx@db:5432/nodemgr"}},
		{"environment, key=value", nil, map[string]string{"NODEMGR_SERVER_DB": "postgres://db/nodemgr?sslmode=disable&password=hunter2",
			"NODEMGR_SERVER_DB_LISTEN_URL": "host=db dbname=nodemgr password=hunter3"},
			map[string]string{"db": "postgres://db/nodemgr?sslmode=disable&password=xxxxx", "db_listen_url": "host=db dbname=nodemgr password=xxxxx"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runEnv(t, tc.env, append([]string{"server", "--print-config"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("server --print-config = exit %d: %s", code, stderr)
			}
			if strings.Contains(out, "hunter") {
				t.Errorf("server --print-config shows a database password:\n%s", out)
			}
			got := parsePrinted(t, out)
			for key, want := range tc.want {
				if got[key].value != want {
					t.Errorf("--print-config %s = %q, want %q", key, got[key].value, want)
				}
			}
		})
	}
}
