package proto

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// A remote that reads answers the pings: the connection stays up and
// Contact moves on; the remote's Heard is marked by what it reads.
func TestKeepaliveAnsweredKeepsContact(t *testing.T) {
	a, b := Pipe()
	var heard Heard
	pa := NewPeer(a, nil, Options{Keepalive: 10 * time.Millisecond})
	pb := NewPeer(b, nil, Options{Heard: &heard})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- pa.Run(ctx) }()
	go func() { errB <- pb.Run(ctx) }()

	deadline := time.Now().Add(5 * time.Second)
	for pa.Contact().IsZero() || time.Since(pa.Contact()) > time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("no answered ping in 5s; contact %v", pa.Contact())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := pa.Call(ctx, "x", nil, nil); !errdefs.IsNotFound(err) {
		t.Fatalf("call over a live connection: %v, want the remote's not found", err)
	}
	if heard.Time().IsZero() {
		t.Fatal("the remote read a request but its Heard was never marked")
	}
	select {
	case err := <-errA:
		t.Fatalf("the pinging side stopped: %v", err)
	default:
	}
	cancel()
	<-errA
	<-errB
}

// A remote that stops reading (a frozen process: its kernel keeps the
// connection open) does not answer: the pinging side closes the
// connection within its deadline, and Run says why.
func TestKeepaliveUnansweredClosesConnection(t *testing.T) {
	a, _ := Pipe() // nobody reads the other end
	period := 20 * time.Millisecond
	pa := NewPeer(a, nil, Options{Keepalive: period})
	errA := make(chan error, 1)
	start := time.Now()
	go func() { errA <- pa.Run(context.Background()) }()
	var err error
	select {
	case err = <-errA:
	case <-time.After(10 * time.Second):
		t.Fatal("a silent remote kept the connection for 10s")
	}
	if err == nil || !strings.Contains(err.Error(), "did not answer a ping") || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Run: %v, want an unavailable error that says the remote did not answer a ping", err)
	}
	if took := time.Since(start); took < KeepaliveDeadline*period {
		t.Fatalf("closed after %s, before the deadline of %s", took, KeepaliveDeadline*period)
	}
	if err := pa.Call(context.Background(), "x", nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("call after the keepalive closed: %v, want unavailable", err)
	}
}
