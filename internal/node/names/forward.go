package names

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// forwardTimeout bounds one upstream's answer, UDP and the TCP retry
// together: a stub resolver gives up after about 5s, and the next upstream
// should have its turn before that.
const forwardTimeout = 2 * time.Second

// maxForwards bounds the forwards in flight: each holds a goroutine and a
// socket for up to forwardTimeout per upstream, and a flood of queries for
// outside names should not turn into a flood of sockets. Beyond it, queries
// get SERVFAIL at once.
const maxForwards = 256

// forwarder sends queries for names outside Zone to upstream resolvers.
type forwarder struct {
	upstreams []string // ip:port
	timeout   time.Duration
	udp, tcp  *dns.Client
	slots     chan struct{}
}

func newForwarder(upstreams []string) *forwarder {
	return &forwarder{
		upstreams: upstreams,
		timeout:   forwardTimeout,
		udp:       &dns.Client{Net: "udp"},
		tcp:       &dns.Client{Net: "tcp"},
		slots:     make(chan struct{}, maxForwards),
	}
}

// errBusy says that maxForwards are in flight.
var errBusy = errors.New("too many forwards in flight")

// exchange asks each upstream in turn and returns the first answer that is
// not SERVFAIL or REFUSED, else the last answer, else the errors. The reply
// carries req's ID; upstreams see a fresh one, so that a forged reply must
// guess it.
func (f *forwarder) exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		return nil, errBusy
	}
	q := req.Copy()
	var last *dns.Msg
	var errs []error
	for _, up := range f.upstreams {
		q.Id = dns.Id()
		resp, err := f.exchangeOne(ctx, q, up)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", up, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		resp.Id = req.Id
		last = resp
		if resp.Rcode != dns.RcodeServerFailure && resp.Rcode != dns.RcodeRefused {
			break
		}
	}
	if last != nil {
		return last, nil
	}
	return nil, errors.Join(errs...)
}

// exchangeOne asks one upstream over UDP, and again over TCP when the
// answer did not fit.
func (f *forwarder) exchangeOne(ctx context.Context, q *dns.Msg, upstream string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	resp, _, err := f.udp.ExchangeContext(ctx, q, upstream)
	if err == nil && resp.Truncated {
		resp, _, err = f.tcp.ExchangeContext(ctx, q, upstream)
	}
	return resp, err
}

// checkUpstreams checks that each upstream is ip:port: a resolver named
// by a host name would need a resolver first.
func checkUpstreams(ups []string) error {
	for _, up := range ups {
		if _, err := netip.ParseAddrPort(up); err != nil {
			return fmt.Errorf("upstream %q: must be ip:port: %w", up, errdefs.ErrInvalid)
		}
	}
	return nil
}

// readResolvConf returns the nameservers of the resolv.conf at path.
func readResolvConf(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read upstreams: %w", err)
	}
	defer f.Close()
	ups := parseResolvConf(bufio.NewScanner(f))
	if len(ups) == 0 {
		return nil, fmt.Errorf("read upstreams: no nameserver in %s", path)
	}
	return ups, nil
}

func resolvConfPath(cfg Config) string {
	if cfg.ResolvConf == "" {
		return DefaultResolvConf
	}
	return cfg.ResolvConf
}

// parseResolvConf returns the nameserver lines' addresses as ip:53. Lines
// it cannot read are skipped, as the C library does.
func parseResolvConf(sc *bufio.Scanner) []string {
	var ups []string
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line, _, _ = strings.Cut(line, ";")
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil {
			ups = append(ups, netip.AddrPortFrom(a, 53).String())
		}
	}
	return ups
}
