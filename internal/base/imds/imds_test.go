package imds

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

func TestNotices(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 2, 0, 0, time.UTC)
	tests := []struct {
		name string
		post func(m *ec2test.IMDS)
		want []api.Notice
	}{
		{"none", func(*ec2test.IMDS) {}, nil},
		{"interruption", func(m *ec2test.IMDS) { m.NoticeInterruption("terminate", at) },
			[]api.Notice{{Kind: api.NoticeInterruption, Action: "terminate", Time: at}}},
		{"stop", func(m *ec2test.IMDS) { m.NoticeInterruption("stop", at) },
			[]api.Notice{{Kind: api.NoticeInterruption, Action: "stop", Time: at}}},
		{"rebalance", func(m *ec2test.IMDS) { m.RecommendRebalance(at) },
			[]api.Notice{{Kind: api.NoticeRebalance, Time: at}}},
		{"both", func(m *ec2test.IMDS) {
			m.RecommendRebalance(at.Add(-time.Minute))
			m.NoticeInterruption("hibernate", at)
		},
			[]api.Notice{{Kind: api.NoticeInterruption, Action: "hibernate", Time: at}, {Kind: api.NoticeRebalance, Time: at.Add(-time.Minute)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ec2test.NewIMDS(t)
			tc.post(m)
			got, err := New(m.URL).Notices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Notices() (-want +got):\n%s", diff)
			}
		})
	}
}

// The client asks for a token once and sends it with every read; the
// fake refuses reads without one, so a client that did not would fail.
func TestTokenIsReused(t *testing.T) {
	m := ec2test.NewIMDS(t)
	c := New(m.URL)
	for range 3 {
		if _, err := c.Notices(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Calls("PUT", ec2test.IMDSTokenPath); n != 1 {
		t.Errorf("token PUTs = %d, want 1", n)
	}
	if n := m.Calls("GET", ec2test.IMDSActionPath); n != 3 {
		t.Errorf("instance-action GETs = %d, want 3", n)
	}
	if n := m.Refused(); n != 0 {
		t.Errorf("reads refused = %d, want 0", n)
	}
}

// A token the service no longer knows (it restarted) is replaced, not
// reported as an error.
func TestTokenRefusedIsRenewed(t *testing.T) {
	m := ec2test.NewIMDS(t)
	c := New(m.URL)
	c.token, c.expires = "stale", time.Now().Add(time.Hour)
	m.NoticeInterruption("terminate", time.Now().Add(2*time.Minute))
	got, err := c.Notices(t.Context())
	if err != nil {
		t.Fatalf("Notices with a stale token: %v", err)
	}
	if len(got) != 1 || m.Refused() != 1 || m.Calls("PUT", ec2test.IMDSTokenPath) != 1 {
		t.Errorf("got %v, refused %d, token PUTs %d; want the notice after one refusal and one new token", got, m.Refused(), m.Calls("PUT", ec2test.IMDSTokenPath))
	}
}

// Without IMDSv2's token the fake answers 401, as EC2 does with IMDSv2
// required.
func TestFakeRequiresToken(t *testing.T) {
	m := ec2test.NewIMDS(t)
	resp, err := http.Get(m.URL + ec2test.IMDSActionPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without a token = %d, want 401", resp.StatusCode)
	}
}

// Watch tells of each change once, and a service that does not answer is
// one warning, however long it stays away.
func TestWatch(t *testing.T) {
	m := ec2test.NewIMDS(t)
	var mu sync.Mutex
	var seen [][]api.Notice
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go Watch(ctx, New(m.URL), 5*time.Millisecond, slog.New(slog.DiscardHandler), func(n []api.Notice) {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	m.RecommendRebalance(at)
	waitFor(t, func() bool { return count() == 1 })
	m.NoticeInterruption("terminate", at)
	waitFor(t, func() bool { return count() == 2 })
	time.Sleep(30 * time.Millisecond) // polls that find the same say nothing
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || len(seen[1]) != 2 || seen[1][0].Kind != api.NoticeInterruption {
		t.Errorf("Watch told %v, want the rebalance, then the interruption with it", seen)
	}
}

func TestWatchUnreachableIsQuiet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	called := false
	Watch(ctx, New("http://"+addr), 5*time.Millisecond, log, func([]api.Notice) { called = true })
	if n := strings.Count(buf.String(), "\n"); n != 1 || called {
		t.Errorf("an unreachable service logged %d lines (want 1) and called back %v:\n%s", n, called, buf.String())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
