package names

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Defaults for the zero values of Config.
const (
	DefaultResolvConf = "/etc/resolv.conf"
	DefaultTTL        = 5 * time.Second
)

// maxTTL bounds Config.TTL: names move, and the TTL must fit in 32 bits.
const maxTTL = 24 * time.Hour

// ednsSize is the UDP payload this server says it takes: the size that
// avoids IP fragmentation on common paths (DNS flag day 2020).
const ednsSize = 1232

// shutdownTimeout bounds how long Run waits for queries in flight once it
// is told to stop. Forwards in flight are cancelled first, so it is ample.
const shutdownTimeout = 5 * time.Second

// Config configures a Server.
type Config struct {
	// Listen are the host:port addresses to serve on, UDP and TCP each,
	// such as the node's overlay address "100.64.3.1:53". With port 0
	// (tests) UDP and TCP get the same port.
	Listen []string
	// Upstream are the ip:port resolvers that names outside Zone are
	// forwarded to, tried in turn. Empty means the nameservers of
	// ResolvConf.
	Upstream []string
	// ResolvConf is read for upstreams when Upstream is empty; empty
	// means DefaultResolvConf. Its nameservers are used as they are,
	// loopback ones included: the agent forwards from the host's network
	// namespace, where they are reachable, not from the container's.
	ResolvConf string
	// TTL is the time to live of answers in Zone, positive and negative.
	// Zero means DefaultTTL. It is short because a restore moves a replica.
	TTL time.Duration
}

// Server answers DNS queries for the names of Zone from its table and
// forwards the rest. Set, Lookup and queries are safe together.
type Server struct {
	log   *slog.Logger
	ttl   uint32 // seconds
	fwd   *forwarder
	conns []listener

	setMu sync.Mutex // orders Sets, so that serials increase
	table atomic.Pointer[table]

	// base is the context of forwards; cancelling it ends them when the
	// server stops.
	base       context.Context
	cancelBase context.CancelFunc

	closing   chan struct{} // closed by Close: Run returns
	closeOnce sync.Once
	mu        sync.Mutex
	runDone   chan struct{} // closed when Run returns; nil before Run
}

// listener is one Listen address, bound for UDP and TCP on the same port.
type listener struct {
	udp net.PacketConn
	tcp net.Listener
}

// New validates cfg, reads the upstreams and binds every listener, so that
// an address in use is reported here. The table starts empty.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	ttl, err := ttlSeconds(cfg.TTL)
	if err != nil {
		return nil, fmt.Errorf("new names server: %w", err)
	}
	if len(cfg.Listen) == 0 {
		return nil, fmt.Errorf("new names server: no listen address: %w", errdefs.ErrInvalid)
	}
	if err := checkUpstreams(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("new names server: %w", err)
	}
	s := &Server{log: log, ttl: ttl, closing: make(chan struct{})}
	ups := cfg.Upstream
	if len(ups) == 0 {
		ups, err = readResolvConf(resolvConfPath(cfg))
	}
	if len(ups) > 0 {
		s.fwd = newForwarder(ups)
	} else {
		// Once, here, not per query: a node without resolvers would log
		// every query its containers make. The names of Zone are still
		// served.
		log.Warn("names outside the zone are refused: no upstream resolver", "zone", Zone, "err", err)
	}
	for _, addr := range cfg.Listen {
		l, err := bind(addr)
		if err != nil {
			s.closeConns()
			return nil, fmt.Errorf("new names server: %w", err)
		}
		s.conns = append(s.conns, l)
	}
	s.table.Store(newTable(1, nil))
	s.base, s.cancelBase = context.WithCancel(context.Background())
	return s, nil
}

func ttlSeconds(ttl time.Duration) (uint32, error) {
	switch {
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < time.Second || ttl > maxTTL:
		return 0, fmt.Errorf("ttl %v: must be between 1s and %v: %w", ttl, maxTTL, errdefs.ErrInvalid)
	}
	return uint32(ttl / time.Second), nil
}

// bind listens on addr for UDP, then for TCP on the port UDP got.
func bind(addr string) (listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return listener{}, fmt.Errorf("listen %s: %w", addr, err)
	}
	// With port 0 the port UDP got may be taken for TCP; another try
	// draws another port.
	tries := 1
	if port == "0" {
		tries = 10
	}
	for i := 1; ; i++ {
		udp, err := net.ListenPacket("udp", addr)
		if err != nil {
			return listener{}, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		if err == nil {
			return listener{udp: udp, tcp: tcp}, nil
		}
		udp.Close()
		if i == tries {
			return listener{}, fmt.Errorf("listen tcp %s: %w", addr, err)
		}
	}
}

// Addrs returns the bound UDP addresses, one per Listen address; TCP is
// on the same ones.
func (s *Server) Addrs() []net.Addr {
	addrs := make([]net.Addr, len(s.conns))
	for i, l := range s.conns {
		addrs[i] = l.udp.LocalAddr()
	}
	return addrs
}

// Run serves on every listener until ctx ends or Close is called, then
// waits for the queries in flight. It runs once. Cancellation is not an
// error; a listener that fails stops them all.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.runDone != nil || s.isClosing() {
		s.mu.Unlock()
		return errors.New("run names server: already run or closed")
	}
	s.runDone = make(chan struct{})
	s.mu.Unlock()
	defer close(s.runDone)

	stop := make(chan struct{})
	errc := make(chan error, 2*len(s.conns))
	servers := s.servers()
	for _, srv := range servers {
		go func() { errc <- serve(srv, stop) }()
	}
	var errs []error
	pending := len(servers)
	select {
	case <-ctx.Done():
	case <-s.closing:
	case err := <-errc:
		errs = append(errs, err)
		pending--
	}
	close(stop)
	s.cancelBase()
	for range pending {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// servers makes a miekg/dns server for each bound socket.
func (s *Server) servers() []*dns.Server {
	h := dns.HandlerFunc(s.serveDNS)
	var servers []*dns.Server
	for _, l := range s.conns {
		servers = append(servers,
			&dns.Server{PacketConn: l.udp, Handler: h},
			&dns.Server{Listener: l.tcp, Handler: h})
	}
	return servers
}

// serve runs srv until stop is closed, then shuts it down.
func serve(srv *dns.Server, stop <-chan struct{}) error {
	addr := srvAddr(srv)
	// Shutting down a server that has not started yet fails and leaves
	// it to start later, so wait for it to start or fail first.
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	for _, wait := range []<-chan struct{}{started, stop} {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("serve dns on %s: %w", addr, err)
			}
			return nil
		case <-wait:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.ShutdownContext(ctx); err != nil {
		return fmt.Errorf("shut down dns on %s: %w", addr, err)
	}
	if err := <-done; err != nil {
		return fmt.Errorf("serve dns on %s: %w", addr, err)
	}
	return nil
}

func srvAddr(srv *dns.Server) string {
	if srv.PacketConn != nil {
		return "udp " + srv.PacketConn.LocalAddr().String()
	}
	return "tcp " + srv.Listener.Addr().String()
}

// Close stops Run, if it runs, and releases the listeners. It may be
// called more than once, and instead of Run.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.mu.Lock()
	done := s.runDone
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	s.cancelBase()
	return s.closeConns()
}

func (s *Server) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// closeConns closes every socket; those Run's shutdown closed already are
// not an error.
func (s *Server) closeConns() error {
	var errs []error
	for _, l := range s.conns {
		for _, err := range []error{l.udp.Close(), l.tcp.Close()} {
			if err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close names server: %w", err)
	}
	return nil
}

// serveDNS answers one query: from the table for names in Zone, from the
// upstreams for the rest.
func (s *Server) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	// miekg/dns rejects most malformed messages before they get here,
	// but lets NOTIFY through, which a resolver has no use for.
	if req.Opcode != dns.OpcodeQuery {
		reply(w, req, new(dns.Msg).SetRcode(req, dns.RcodeNotImplemented))
		return
	}
	if len(req.Question) != 1 {
		reply(w, req, new(dns.Msg).SetRcode(req, dns.RcodeFormatError))
		return
	}
	q := req.Question[0]
	if dns.IsSubDomain(Zone, strings.ToLower(q.Name)) {
		reply(w, req, s.table.Load().answer(req, s.ttl))
		return
	}
	if s.fwd == nil {
		reply(w, req, new(dns.Msg).SetRcode(req, dns.RcodeRefused))
		return
	}
	resp, err := s.fwd.exchange(s.base, req)
	if err != nil {
		s.log.Debug("forward dns query", "name", q.Name, "type", dns.TypeToString[q.Qtype], "err", err)
		resp = new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
	}
	reply(w, req, resp)
}

// reply writes resp, cut down over UDP to the size the client said it
// takes (512 bytes, or more with EDNS0) and marked truncated when cut, so
// that the client asks again over TCP.
func reply(w dns.ResponseWriter, req, resp *dns.Msg) {
	// RFC 6891: a request with an OPT record gets one back. Forwarded
	// replies carry the upstream's.
	if req.IsEdns0() != nil && resp.IsEdns0() == nil {
		resp.SetEdns0(ednsSize, false)
	}
	if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil && int(opt.UDPSize()) > size {
			size = int(opt.UDPSize())
		}
		resp.Truncate(size)
	}
	// An error here is the client's: gone, or a TCP connection reset.
	_ = w.WriteMsg(resp)
}
