// The Mesh benchmarks measure what the overlay costs two workloads on
// different nodes: throughput and round-trip latency between two network
// namespaces over their veth pair directly (underlay) and over a Mesh on
// each side (overlay), in one run. As root:
//
//	go test -run '^$' -bench Mesh -benchtime 3x ./internal/node/overlay/
//
// With -v they log the device kind and GOMAXPROCS. Without root, a TUN
// device or the ip command they skip, or fail if NODEMGR_REQUIRE_OVERLAY=1.
//
// The workloads are this process, its sockets made inside the namespaces;
// each Mesh runs in its own helper process, as an agent would. All of them
// share this machine's CPUs, which a pair of real nodes would not.

package overlay

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Ports of the workloads in namespace B, on all its addresses.
const (
	sinkPort = 7778 // reads until EOF, then answers with the byte count
	pongPort = 7779 // echoes each byte
)

// chunkSize is one op of BenchmarkMeshThroughput.
const chunkSize = 1 << 20

// target is where a sub-benchmark's workload in A calls B.
type target struct {
	name     string
	from, to netip.Addr
}

// startBenchMesh starts a meshPair, brings its mesh up, and starts the
// workloads' servers in B.
func startBenchMesh(b *testing.B) *meshPair {
	b.Helper()
	p := startMeshPair(b)
	p.a.mustApply(p.stateA)
	p.b.mustApply(p.stateB)
	waitFor(b, "A reaches B over the mesh", 20*time.Second, func() error { return p.a.reach(p.addrA, p.addrB) })
	b.Logf("device kind %s; GOMAXPROCS %d of %d CPUs, shared by both workloads and both WireGuard ends",
		p.a.kind, runtime.GOMAXPROCS(0), runtime.NumCPU())
	p.serve(b, sinkPort, sink)
	p.serve(b, pongPort, pong)
	return p
}

func (m *meshPair) targets() []target {
	return []target{
		{"underlay", netip.MustParseAddr(m.underA), netip.MustParseAddr(m.underB)},
		{"overlay", m.addrA, m.addrB},
	}
}

// serve listens on port in B and runs handle on each connection.
func (m *meshPair) serve(b *testing.B, port int, handle func(net.Conn)) {
	b.Helper()
	var ln net.Listener
	err := inNetns(m.b.ns, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		b.Fatalf("listen in %s: %v", m.b.ns, err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// dial calls B's port at t.to from A's t.from. A stuck mesh fails the
// benchmark after ten minutes rather than hang it.
func (m *meshPair) dial(b *testing.B, t target, port int) *net.TCPConn {
	b.Helper()
	var c net.Conn
	err := inNetns(m.a.ns, func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: t.from.AsSlice()}}
		c, err = d.Dial("tcp4", netip.AddrPortFrom(t.to, uint16(port)).String())
		return err
	})
	if err != nil {
		b.Fatalf("dial %s from %s: %v", t.to, t.from, err)
	}
	b.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	return c.(*net.TCPConn)
}

// inNetns runs f on an OS thread in the network namespace ns, so that the
// sockets f makes belong to ns; they stay there whichever thread uses them
// later. The thread is never unlocked, so the runtime ends it with the
// goroutine rather than reuse it in the wrong namespace.
func inNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// sink reads until EOF and answers with the number of bytes it read.
func sink(c net.Conn) {
	buf := make([]byte, chunkSize)
	var n uint64
	for {
		k, err := c.Read(buf)
		n += uint64(k)
		if err != nil {
			break
		}
	}
	c.Write(binary.BigEndian.AppendUint64(nil, n))
}

// pong echoes each byte back.
func pong(c net.Conn) {
	buf := make([]byte, 1)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// BenchmarkMeshThroughput streams b.N chunks of 1 MiB over one TCP
// connection from A to B, timed until B has read them all.
func BenchmarkMeshThroughput(b *testing.B) {
	m := startBenchMesh(b)
	for _, t := range m.targets() {
		b.Run(t.name, func(b *testing.B) {
			c := m.dial(b, t, sinkPort)
			chunk := make([]byte, chunkSize)
			b.SetBytes(chunkSize)
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(chunk); err != nil {
					b.Fatalf("write: %v", err)
				}
			}
			if err := c.CloseWrite(); err != nil {
				b.Fatalf("close write: %v", err)
			}
			var ack [8]byte
			if _, err := io.ReadFull(c, ack[:]); err != nil {
				b.Fatalf("read the count: %v", err)
			}
			b.StopTimer()
			if got, want := binary.BigEndian.Uint64(ack[:]), uint64(b.N)*chunkSize; got != want {
				b.Fatalf("B read %d bytes, want %d", got, want)
			}
		})
	}
}

// BenchmarkMeshRoundTrip sends one byte from A to B and waits for it to
// come back, b.N times over one TCP connection, and reports the 50th and
// 99th percentiles of those round trips as well as their mean (ns/op).
func BenchmarkMeshRoundTrip(b *testing.B) {
	m := startBenchMesh(b)
	for _, t := range m.targets() {
		b.Run(t.name, func(b *testing.B) {
			c := m.dial(b, t, pongPort)
			buf := make([]byte, 1)
			rtts := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if _, err := c.Write(buf); err != nil {
					b.Fatalf("write: %v", err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatalf("read: %v", err)
				}
				rtts[i] = time.Since(start)
			}
			b.StopTimer()
			slices.Sort(rtts)
			b.ReportMetric(micros(rtts[len(rtts)*50/100]), "p50-µs")
			b.ReportMetric(micros(rtts[len(rtts)*99/100]), "p99-µs")
		})
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
