package pgtest

import (
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Freezer stands between clients and one database as a TCP proxy that can
// stop forwarding: frozen, it keeps every connection open and accepts new
// ones but passes no byte either way, as a PostgreSQL stopped with
// SIGSTOP does. The shared server is not touched, so other tests of the
// package go on while one test's database is frozen.
type Freezer struct {
	url string

	mu     sync.Mutex
	frozen bool
	thawed *sync.Cond
}

// Freezable returns a Freezer for dbURL (a URL from NewDatabase); clients
// use its URL. It stops with the test.
func Freezable(t testing.TB, dbURL string) *Freezer {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("pgtest: freezer for %s: %v", dbURL, err)
	}
	// The shared server listens on a unix socket in its directory, as
	// libpq names it; a TCP host is dialled as such.
	network, addr := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if filepath.IsAbs(cfg.Host) {
		network, addr = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Freezer{}
	f.thawed = sync.NewCond(&f.mu)
	var conns sync.WaitGroup
	var open sync.Map // net.Conn → struct{}: closed when the test ends
	t.Cleanup(func() {
		ln.Close()
		f.Thaw()
		open.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		conns.Wait()
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				f.serve(client, network, addr, &open)
			}()
		}
	}()
	f.url = (&url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: ln.Addr().String(), Path: "/" + cfg.Database,
		RawQuery: url.Values{"sslmode": {"disable"}}.Encode()}).String()
	return f
}

// URL is the database's URL through the freezer.
func (f *Freezer) URL() string { return f.url }

// Freeze stops forwarding until Thaw.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// Thaw forwards again what waited.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	f.frozen = false
	f.mu.Unlock()
	f.thawed.Broadcast()
}

// waitThawed blocks while the freezer is frozen.
func (f *Freezer) waitThawed() {
	f.mu.Lock()
	for f.frozen {
		f.thawed.Wait()
	}
	f.mu.Unlock()
}

// serve connects one client to the database once thawed and copies both
// ways, each read held back while frozen.
func (f *Freezer) serve(client net.Conn, network, addr string, open *sync.Map) {
	open.Store(client, struct{}{})
	defer func() { open.Delete(client); client.Close() }()
	f.waitThawed()
	db, err := net.Dial(network, addr)
	if err != nil {
		return
	}
	open.Store(db, struct{}{})
	defer func() { open.Delete(db); db.Close() }()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		f.copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(db, client)
	go pipe(client, db)
	<-done
	<-done
}

// copy forwards src to dst, holding each chunk read while frozen.
func (f *Freezer) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.waitThawed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
