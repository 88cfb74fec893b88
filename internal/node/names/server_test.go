package names

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// start makes a server on a free port of 127.0.0.1 and runs it until the
// test ends. Unless cfg says otherwise it has no upstream: it must not
// depend on the machine's resolv.conf.
func start(tb testing.TB, cfg Config) (*Server, string) {
	tb.Helper()
	s := newServer(tb, cfg, slog.New(slog.DiscardHandler))
	run(tb, s)
	return s, s.Addrs()[0].String()
}

func newServer(tb testing.TB, cfg Config, log *slog.Logger) *Server {
	tb.Helper()
	if cfg.Listen == nil {
		cfg.Listen = []string{"127.0.0.1:0"}
	}
	if cfg.Upstream == nil && cfg.ResolvConf == "" {
		cfg.ResolvConf = filepath.Join(tb.TempDir(), "missing")
	}
	s, err := New(cfg, log)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return s
}

// run runs s until the test ends.
func run(tb testing.TB, s *Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
}

// ask sends one query over network ("udp" or "tcp") and returns the reply.
// The client checks that the reply has the query's ID.
func ask(tb testing.TB, network, addr, name string, qtype uint16) *dns.Msg {
	tb.Helper()
	return exchange(tb, network, addr, new(dns.Msg).SetQuestion(name, qtype))
}

func exchange(tb testing.TB, network, addr string, m *dns.Msg) *dns.Msg {
	tb.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		tb.Fatalf("%s query %v: %v", network, m.Question, err)
	}
	return r
}

func TestNewInvalid(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no listen", Config{ResolvConf: missing}, "no listen address"},
		{"listen without port", Config{Listen: []string{"127.0.0.1"}, ResolvConf: missing}, "127.0.0.1"},
		{"negative ttl", Config{Listen: []string{"127.0.0.1:0"}, TTL: -time.Second}, "ttl -1s"},
		{"ttl under 1s", Config{Listen: []string{"127.0.0.1:0"}, TTL: time.Millisecond}, "ttl 1ms"},
		{"upstream by name", Config{Listen: []string{"127.0.0.1:0"}, Upstream: []string{"dns.google:53"}}, `"dns.google:53"`},
		{"upstream without port", Config{Listen: []string{"127.0.0.1:0"}, Upstream: []string{"192.0.2.1"}}, `"192.0.2.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				s.Close()
				t.Fatalf("New(%+v) = nil error, want one naming %s", tc.cfg, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) = %v, want it to name %s", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestNewAddressInUse(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.LocalAddr().String()
	free := "127.0.0.1:0"
	s, err := New(Config{Listen: []string{free, addr}, ResolvConf: "/nonexistent"}, slog.New(slog.DiscardHandler))
	if err == nil {
		s.Close()
		t.Fatalf("New(listen %s, in use) = nil error", addr)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("New(listen %s, in use) = %v, want it to name the address", addr, err)
	}
}

func TestListenSeveral(t *testing.T) {
	s, _ := start(t, Config{Listen: []string{"127.0.0.1:0", "127.0.0.1:0"}})
	if err := s.Set(map[string][]netip.Addr{"web.shop.nodemgr": {ip("10.0.0.1")}}); err != nil {
		t.Fatal(err)
	}
	addrs := s.Addrs()
	if len(addrs) != 2 {
		t.Fatalf("Addrs() = %v, want 2", addrs)
	}
	for _, a := range addrs {
		for _, network := range []string{"udp", "tcp"} {
			r := ask(t, network, a.String(), "web.shop.nodemgr.", dns.TypeA)
			if got := answers(r); len(got) != 1 || got[0] != "10.0.0.1" {
				t.Errorf("%s %s: A web.shop.nodemgr. = %v, want [10.0.0.1]", network, a, got)
			}
		}
	}
}

// TestRunClose checks the lifecycle: Run ends without error when its
// context does or on Close, Close may come twice, and Close without Run
// releases the ports.
func TestRunClose(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cfg := Config{Listen: []string{"127.0.0.1:0"}, ResolvConf: "/nonexistent"}

	t.Run("cancel", func(t *testing.T) {
		s, err := New(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		ask(t, "tcp", s.Addrs()[0].String(), "x.nodemgr.", dns.TypeA) // serving, with a TCP connection open
		cancel()
		if err := waitErr(t, done); err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
		if err := s.Run(context.Background()); err == nil {
			t.Errorf("second Run = nil, want an error")
		}
		for i := range 2 {
			if err := s.Close(); err != nil {
				t.Errorf("Close #%d = %v", i+1, err)
			}
		}
	})
	t.Run("close while running", func(t *testing.T) {
		s, err := New(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(context.Background()) }()
		ask(t, "udp", s.Addrs()[0].String(), "x.nodemgr.", dns.TypeA)
		if err := s.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
		if err := waitErr(t, done); err != nil {
			t.Errorf("Run after Close = %v, want nil", err)
		}
	})
	t.Run("close without run", func(t *testing.T) {
		s, err := New(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		addr := s.Addrs()[0].String()
		if err := s.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
		s2, err := New(Config{Listen: []string{addr}, ResolvConf: "/nonexistent"}, log)
		if err != nil {
			t.Fatalf("New on the port Close released: %v", err)
		}
		s2.Close()
	})
}

func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// TestBounds checks that only well-formed queries get an answer.
func TestBounds(t *testing.T) {
	_, addr := start(t, Config{})

	// Raw messages: a reply to these must be no bigger than what came,
	// or the server amplifies spoofed traffic.
	for _, tc := range []struct {
		name  string
		raw   string
		reply int // rcode; -1: none
	}{
		{"shorter than a header", "\x12\x34\x01\x00\x00\x01", -1},
		{"a response", "\x12\x34\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01", -1},
		{"question cut short", "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff", dns.RcodeFormatError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("udp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(tc.raw)); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 512)
			n, err := conn.Read(buf)
			switch {
			case tc.reply < 0 && !errors.Is(err, os.ErrDeadlineExceeded):
				t.Errorf("reply: %d bytes, %v; want none", n, err)
			case tc.reply >= 0 && err != nil:
				t.Errorf("reply: %v; want %s", err, dns.RcodeToString[tc.reply])
			case tc.reply >= 0:
				var r dns.Msg
				if err := r.Unpack(buf[:n]); err != nil || r.Rcode != tc.reply || n > len(tc.raw) {
					t.Errorf("reply: %d bytes, rcode %s, %v; want %s in at most %d bytes", n, dns.RcodeToString[r.Rcode], err, dns.RcodeToString[tc.reply], len(tc.raw))
				}
			}
		})
	}

	two := new(dns.Msg).SetQuestion("a.nodemgr.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "b.nodemgr.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	notify := new(dns.Msg).SetNotify("a.nodemgr.")
	update := new(dns.Msg).SetUpdate(Zone)
	for _, tc := range []struct {
		name string
		m    *dns.Msg
		want int
	}{
		{"two questions", two, dns.RcodeFormatError},
		{"notify", notify, dns.RcodeNotImplemented},
		{"update", update, dns.RcodeNotImplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := exchange(t, "udp", addr, tc.m)
			if r.Rcode != tc.want {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.want])
			}
		})
	}
}

func TestSetErrorsAreInvalid(t *testing.T) {
	s, _ := start(t, Config{})
	err := s.Set(map[string][]netip.Addr{"example.com": nil})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Set(outside name) = %v, want errdefs.ErrInvalid", err)
	}
}
