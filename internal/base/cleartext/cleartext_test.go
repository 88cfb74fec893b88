package cleartext

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		url     string
		allow   bool
		refused bool
	}{
		{"http://127.0.0.1:7070", false, false},
		{"http://127.9.9.9:7070", false, false},
		{"http://localhost:7070", false, false},
		{"http://LOCALHOST:7070", false, false},
		{"http://[::1]:7070", false, false},
		{"ws://127.0.0.1:7070/v1/agent/connect", false, false},
		{"https://10.77.3.1:7070", false, false},
		{"wss://10.77.3.1:7070", false, false},
		{"http://10.77.3.1:7070", false, true},
		{"HTTP://10.77.3.1:7070", false, true},
		{"ws://192.0.2.1:7070/v1/agent/connect", false, true},
		{"http://server.example:7070", false, true},
		{"http://localhost.example:7070", false, true},
		{"http://[2001:db8::1]:7070", false, true},
		{"http://0.0.0.0:7070", false, true}, // every address, not only this machine's loopback
		{"http://10.77.3.1:7070", true, false},
	} {
		err := Check(tc.url, tc.allow, "--insecure-http")
		if got := err != nil; got != tc.refused {
			t.Errorf("Check(%q, %v) = %v, want refused %v", tc.url, tc.allow, err, tc.refused)
			continue
		}
		if err == nil {
			continue
		}
		var ce *Error
		if !errors.As(err, &ce) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Check(%q) = %T %v, want an *Error that is ErrInvalid", tc.url, err, err)
		}
		for _, want := range []string{tc.url, "https://", "--insecure-http", "clear text"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Check(%q) = %q, want it to mention %q", tc.url, err, want)
			}
		}
	}
}
