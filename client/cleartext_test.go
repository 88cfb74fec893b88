package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/cleartext"
)

// dialCounter is a transport that counts its dials and fails them: it
// stands in for the network, so no test reaches a real address beyond
// loopback.
type dialCounter struct{ dials atomic.Int32 }

func (d *dialCounter) transport() *http.Transport {
	return &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.dials.Add(1)
		return nil, errors.New("test network: no route")
	}}
}

// TestTokenNotSentInClear is the audit's `whoami --addr http://10.77.3.1:P`:
// a token bound for plain HTTP beyond loopback is refused before anything
// is dialled, unless AllowInsecureHTTP says the caller accepts the risk.
func TestTokenNotSentInClear(t *testing.T) {
	for _, tc := range []struct {
		name      string
		addr      string
		token     string
		opts      []Option
		wantDials int32
		refused   bool
	}{
		{"plain HTTP beyond loopback", "http://10.77.3.1:7070", "nmu_secret", nil, 0, true},
		{"host:port means http://", "192.0.2.1:7070", "nmu_secret", nil, 0, true},
		{"a name is not loopback", "http://nodemgr.example:7070", "nmu_secret", nil, 0, true},
		{"allowed", "http://192.0.2.1:7070", "nmu_secret", []Option{AllowInsecureHTTP()}, 1, false},
		{"HTTPS", "https://192.0.2.1:7070", "nmu_secret", nil, 1, false},
		{"no token to leak", "http://192.0.2.1:7070", "", nil, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d dialCounter
			c := New(tc.addr, tc.token, tc.opts...)
			tr := d.transport()
			c.http.Transport, c.stream.Transport = tr, tr
			_, err := c.Whoami(t.Context())
			var ce *cleartext.Error
			if got := errors.As(err, &ce); got != tc.refused {
				t.Errorf("Whoami at %s = %v, want refused %v", tc.addr, err, tc.refused)
			}
			if tc.refused && (!strings.Contains(err.Error(), "https://") || !strings.Contains(err.Error(), "AllowInsecureHTTP")) {
				t.Errorf("Whoami at %s = %q, want it to say use https:// or AllowInsecureHTTP", tc.addr, err)
			}
			if n := d.dials.Load(); n != tc.wantDials {
				t.Errorf("Whoami at %s dialled %d times, want %d", tc.addr, n, tc.wantDials)
			}
			// Streams (exec, copies) take the same way.
			d.dials.Store(0)
			_, err = c.Exec(t.Context(), "d-1", api.ExecRequest{Argv: []string{"true"}}, nil, nil)
			if got := errors.As(err, &ce); got != tc.refused {
				t.Errorf("Exec at %s = %v, want refused %v", tc.addr, err, tc.refused)
			}
			if n := d.dials.Load(); n != tc.wantDials {
				t.Errorf("Exec at %s dialled %d times, want %d", tc.addr, n, tc.wantDials)
			}
		})
	}
}

// TestTokenOverLoopback: plain HTTP on loopback, where nodemgr dev and the
// tests run, carries the token as before.
func TestTokenOverLoopback(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Write([]byte(`{"name":"admin","admin":true}`))
	}))
	defer srv.Close()
	u, err := New(srv.URL, "nmu_secret").Whoami(t.Context())
	if err != nil || u.Name != "admin" {
		t.Fatalf("Whoami over loopback = %+v, %v", u, err)
	}
	if got.Load() != "Bearer nmu_secret" {
		t.Errorf("server got Authorization %q, want the token", got.Load())
	}
}
