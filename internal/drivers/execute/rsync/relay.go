package rsync

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// rsync's remote shell is a relay: rsync runs `nodemgr rsync-relay SOCKET
// HOST rsync --server ...` where it would run `ssh HOST rsync --server
// ...`, and the relay carries its stdin, stdout, stderr and exit status
// through SOCKET, a unix socket of the executor's, to the process that
// started the copy, which runs the command on the machine over the ssh
// executor's kept connection. So a copy dials nothing (no handshake, no
// second connection, no OpenSSH client or configuration): host keys, keys
// and jump hosts are the ssh executor's, checked once, where its
// connection is made.
//
// SOCKET is in a directory of the executor's that only its user may
// enter, and is listened on for one copy alone, which names the machine:
// the relay can reach that machine and nothing else, and only an rsync
// --server command there.

// RelayCommand is the hidden nodemgr subcommand rsync runs as its remote
// shell; nodemgr's main, and test binaries that copy with rsync
// (sshtest.Main), pass it to RelayMain.
const RelayCommand = "rsync-relay"

// Frame kinds. Relay to executor: the command, stdin, stdin's end.
// Executor to relay: stdout, stderr, the exit status.
const (
	frameArgs   = 'a'
	frameStdin  = 'i'
	frameEOF    = 'e'
	frameStdout = 'o'
	frameStderr = 'r'
	frameExit   = 'x'
)

// maxFrame bounds one frame's payload; a bigger one is refused.
const maxFrame = 1 << 20

// A frame is a kind byte, a big-endian uint32 length and the payload.
func writeFrame(w io.Writer, kind byte, p []byte) error {
	var h [5]byte
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:], uint32(len(p)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

func readFrame(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("relay frame of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return h[0], p, nil
}

// RelayMain is `nodemgr rsync-relay SOCKET HOST COMMAND...`, rsync's
// remote shell: it returns the command's exit status, or 255 (as ssh
// does) when the command could not be run.
func RelayMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "nodemgr %s: %v\n", RelayCommand, err)
		return 255
	}
	if len(args) < 3 {
		return fail(errors.New("usage: nodemgr " + RelayCommand + " SOCKET HOST COMMAND... (rsync's remote shell; not for direct use)"))
	}
	c, err := net.Dial("unix", args[0])
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	if err := writeFrame(c, frameArgs, []byte(strings.Join(args[1:], "\x00"))); err != nil {
		return fail(err)
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && writeFrame(c, frameStdin, buf[:n]) != nil {
				return
			}
			if err != nil {
				writeFrame(c, frameEOF, nil)
				return
			}
		}
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		kind, p, err := readFrame(r)
		if err != nil {
			return fail(fmt.Errorf("the copy's end of the relay: %w", err))
		}
		switch kind {
		case frameStdout:
			if _, err := stdout.Write(p); err != nil {
				return fail(err)
			}
		case frameStderr:
			stderr.Write(p)
		case frameExit:
			if len(p) != 4 {
				return fail(fmt.Errorf("exit frame of %d bytes", len(p)))
			}
			return int(binary.BigEndian.Uint32(p))
		default:
			return fail(fmt.Errorf("unknown relay frame %q", kind))
		}
	}
}

// relayArg is what an argument of the command rsync asks for looks like:
// with -s (--protect-args) paths travel inside rsync's protocol, and the
// command is rsync --server and its options.
var relayArg = regexp.MustCompile(`^[A-Za-z0-9._,=/:+-]*$`)

// relay serves one copy's relay socket: it runs what rsync asks on d
// through the ssh executor. The first error that kept a command from
// running is kept for the copy to report with its class.
type relay struct {
	r      *Rsync
	d      provision.Deployment
	l      net.Listener
	served chan struct{} // closed when serve has returned
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error
}

// listen opens a relay socket for a copy to d.
func (r *Rsync) listen(d provision.Deployment) (*relay, string, error) {
	dir, err := r.dir()
	if err != nil {
		return nil, "", err
	}
	r.mu.Lock()
	r.seq++
	path := filepath.Join(dir, fmt.Sprintf("%d.sock", r.seq))
	r.mu.Unlock()
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", fmt.Errorf("rsync executor: relay socket: %w", err)
	}
	return &relay{r: r, d: d, l: l, served: make(chan struct{})}, path, nil
}

// dir is the executor's private directory, made on first use.
func (r *Rsync) dir() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tmp == "" {
		dir, err := os.MkdirTemp("", "nodemgr-rsync-") // 0700
		if err != nil {
			return "", fmt.Errorf("rsync executor: %w", err)
		}
		r.tmp = dir
	}
	return r.tmp, nil
}

// serve runs the commands relayed until close is called.
func (x *relay) serve(ctx context.Context) {
	defer close(x.served)
	for {
		c, err := x.l.Accept()
		if err != nil {
			return
		}
		x.wg.Go(func() { x.one(ctx, c) })
	}
}

// close stops taking commands, waits for those under way and returns
// the first error that kept one from running.
func (x *relay) close() error {
	x.l.Close()
	<-x.served
	x.wg.Wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *relay) fail(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil {
		x.err = err
	}
}

// one runs the command one relay asks for.
func (x *relay) one(ctx context.Context, c net.Conn) {
	defer c.Close()
	var wmu sync.Mutex
	send := func(kind byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return writeFrame(c, kind, p)
	}
	exit := func(code int) {
		var p [4]byte
		binary.BigEndian.PutUint32(p[:], uint32(code))
		send(frameExit, p[:])
	}
	r := bufio.NewReaderSize(c, 64<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, p, err := readFrame(r)
	if err != nil || kind != frameArgs {
		return
	}
	c.SetReadDeadline(time.Time{})
	argv, err := relayCommand(strings.Split(string(p), "\x00"))
	if err != nil {
		send(frameStderr, []byte(err.Error()+"\n"))
		exit(255)
		return
	}
	stdin, in := io.Pipe()
	go func() {
		for {
			kind, p, err := readFrame(r)
			switch {
			case err != nil:
				in.CloseWithError(err)
				return
			case kind == frameEOF:
				in.Close()
				return
			case kind == frameStdin:
				if _, err := in.Write(p); err != nil {
					return
				}
			}
		}
	}()
	defer stdin.Close()
	code, err := x.r.ssh.Run(ctx, x.d, execute.Command{Argv: argv, Stdin: stdin,
		Stdout: frameWriter{frameStdout, send}, Stderr: frameWriter{frameStderr, send}})
	if err != nil {
		x.fail(err)
		send(frameStderr, []byte("nodemgr: "+err.Error()+"\n"))
		code = 255
	}
	exit(code)
}

// relayCommand checks what rsync asked for, HOST rsync --server ..., and
// returns the command.
func relayCommand(args []string) ([]string, error) {
	if len(args) < 3 || args[0] != hostAlias || args[1] != "rsync" || args[2] != "--server" {
		return nil, fmt.Errorf("the relay runs rsync --server on %s, not %q: %w", hostAlias, args, errdefs.ErrPermission)
	}
	for _, a := range args[1:] {
		if !relayArg.MatchString(a) {
			return nil, fmt.Errorf("the relay refuses argument %q of rsync --server: %w", a, errdefs.ErrPermission)
		}
	}
	return args[1:], nil
}

// frameWriter sends what is written as frames of one kind.
type frameWriter struct {
	kind byte
	send func(byte, []byte) error
}

func (w frameWriter) Write(p []byte) (int, error) {
	for sent := 0; sent < len(p); {
		n := min(len(p)-sent, maxFrame)
		if err := w.send(w.kind, p[sent:sent+n]); err != nil {
			return sent, err
		}
		sent += n
	}
	return len(p), nil
}
