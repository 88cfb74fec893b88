package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// The benchmarks here time what a user runs, end to end: the nodemgr
// binary (built for the benchmark, or $NODEMGR_BENCH_BINARY) as a
// process, over HTTPS to a server in this process with a CA of its own,
// whose executors reach the test sshd; against OpenSSH's ssh and rsync
// on the same sshd, side by side in each round, so that both see the
// same (noisy) machine. Each reports the medians and nodemgr's ratios.

// sshRig is a server whose deployment vm-1 is the test sshd, and the
// environment that points the nodemgr CLI at it.
type sshRig struct {
	srv *sshtest.Server
	bin string
	env []string
	ssh []string // OpenSSH options that reach srv as the executor does, without a host
}

func newSSHRig(b *testing.B) *sshRig {
	srv := sshtest.Shared(b)
	sshtest.Need(b, "ssh")
	dir := b.TempDir()
	cfg := Config{Listen: "127.0.0.1:0", TLSAuto: true, ExecutorSettings: map[string]map[string]string{"ssh": srv.Settings()}}
	cfg.DataDir = dir
	st := openStore(b, dir)
	s, err := New(cfg, st, discardLog())
	if err != nil {
		b.Fatal(err)
	}
	admin, _, err := Bootstrap(b.Context(), st, dir)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	b.Cleanup(func() { cancel(); <-done; s.Close() })
	now := time.Now()
	if err := st.CreateDeployment(b.Context(), store.Deployment{ID: "dep-bench", Provider: "local", ResourceID: "r", Name: "vm-1",
		State: provision.StateRunning, Address: srv.Addr, Executors: []string{"exec:ssh", "copy:sftp", "copy:rsync"},
		CreatedAt: now, UpdatedAt: now}); err != nil {
		b.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(srv.Addr)
	return &sshRig{srv: srv, bin: nodemgrBinary(b),
		env: append(os.Environ(), "NODEMGR_ADDR="+s.URL(), "NODEMGR_TOKEN="+admin, "NODEMGR_CA_CERT="+s.TLS().CAFile),
		ssh: []string{"-F", "/dev/null", "-p", port, "-i", srv.Identity, "-l", srv.User, "-o", "UserKnownHostsFile=" + srv.KnownHosts,
			"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"}}
}

// nodemgr runs the nodemgr CLI.
func (r *sshRig) nodemgr(args ...string) error {
	cmd := exec.Command(r.bin, args...)
	cmd.Env = r.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nodemgr %v: %v: %s", args, err, out)
	}
	return nil
}

// nodemgrBinary is $NODEMGR_BENCH_BINARY, or the nodemgr binary of this
// tree, built for b (go build's cache makes the second build a link).
func nodemgrBinary(b *testing.B) string {
	if p := os.Getenv("NODEMGR_BENCH_BINARY"); p != "" {
		return p
	}
	path := filepath.Join(b.TempDir(), "nodemgr")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/nodemgr/nodemgr/cmd/nodemgr").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v: %s", err, out)
	}
	return path
}

// timings are each kind's durations over the rounds.
type timings map[string][]time.Duration

func (tm timings) time(b *testing.B, kind string, f func() error) {
	start := time.Now()
	if err := f(); err != nil {
		b.Fatalf("%s: %v", kind, err)
	}
	tm[kind] = append(tm[kind], time.Since(start))
}

// report reports each kind's median, in ms, and the ratios named: a
// metric name to the two kinds it divides.
func (tm timings) report(b *testing.B, ratios map[string][2]string) {
	p50 := map[string]time.Duration{}
	for k, ds := range tm {
		p50[k] = median(ds)
		b.ReportMetric(float64(p50[k].Microseconds())/1000, k+"-p50-ms")
	}
	for name, r := range ratios {
		b.ReportMetric(float64(p50[r[0]])/float64(p50[r[1]]), name)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkCLIExecVsOpenSSH runs `nodemgr exec vm-1 -- true` against
// `ssh HOST true` through a warm OpenSSH ControlMaster, and, to tell the
// CLI's start from the rest, `nodemgr --version`. With
// $NODEMGR_BENCH_AGAINST, another nodemgr binary (the build before a
// change) runs the same exec beside them.
//
//	NODEMGR_REQUIRE_SSH=1 go test ./internal/coordinator/server -run '^$' -bench CLIExecVsOpenSSH -benchtime 40x
func BenchmarkCLIExecVsOpenSSH(b *testing.B) {
	r := newSSHRig(b)
	host, _, _ := net.SplitHostPort(r.srv.Addr)
	cm := filepath.Join(b.TempDir(), "cm")
	master := append(slices.Clone(r.ssh), "-o", "ControlMaster=auto", "-o", "ControlPath="+cm, "-o", "ControlPersist=60")
	b.Cleanup(func() { exec.Command("ssh", append(slices.Clone(master), "-O", "exit", host)...).Run() })
	run := map[string]func() error{
		"nodemgr-exec":    func() error { return r.nodemgr("exec", "vm-1", "--", "true") },
		"nodemgr-version": func() error { return r.nodemgr("--version") },
		"ssh-controlmst":  func() error { return command("ssh", append(slices.Clone(master), host, "true")...) },
	}
	kinds := []string{"nodemgr-exec", "nodemgr-version", "ssh-controlmst"}
	ratios := map[string][2]string{"ratio-vs-controlmaster": {"nodemgr-exec", "ssh-controlmst"},
		"version-vs-controlmaster": {"nodemgr-version", "ssh-controlmst"}}
	if against := os.Getenv("NODEMGR_BENCH_AGAINST"); against != "" {
		old := &sshRig{bin: against, env: r.env}
		run["against-exec"] = func() error { return old.nodemgr("exec", "vm-1", "--", "true") }
		kinds = append(kinds, "against-exec")
		ratios["against-ratio-vs-controlmaster"] = [2]string{"against-exec", "ssh-controlmst"}
	}
	// Warm up: the server's connection, the master, the page cache.
	for _, k := range kinds {
		if err := run[k](); err != nil {
			b.Fatalf("%s: %v", k, err)
		}
	}
	tm := timings{}
	for b.Loop() {
		for _, k := range kinds {
			tm.time(b, k, run[k])
		}
	}
	tm.report(b, ratios)
}

// BenchmarkCLICopyVsRsync copies a tree of 200 files with `nodemgr cp
// --via rsync` against plain rsync over a fresh ssh (-e ssh, as a user
// runs it), each a first copy into a fresh directory and an unchanged
// second copy; and, for reference, rsync over a warm ControlMaster.
//
//	NODEMGR_REQUIRE_SSH=1 go test ./internal/coordinator/server -run '^$' -bench CLICopyVsRsync -benchtime 20x
func BenchmarkCLICopyVsRsync(b *testing.B) {
	r := newSSHRig(b)
	sshtest.Need(b, "rsync")
	host, _, _ := net.SplitHostPort(r.srv.Addr)
	src := executetest.BenchTree(b, b.TempDir())
	want := executetest.Listing(b, src)
	out := b.TempDir() // the machine is this host
	cm := filepath.Join(b.TempDir(), "cm")
	rsh := "ssh " + strings.Join(r.ssh, " ") // rsync -e splits on blanks; no option has one
	rshCM := rsh + " -o ControlMaster=auto -o ControlPath=" + cm + " -o ControlPersist=60"
	b.Cleanup(func() {
		exec.Command("ssh", append(slices.Clone(r.ssh), "-o", "ControlPath="+cm, "-O", "exit", host)...).Run()
	})
	rsync := func(e string) func(string) error {
		return func(dst string) error { return command("rsync", "-rlpt", "-e", e, "--", src+"/", host+":"+dst+"/") }
	}
	copies := map[string]func(dst string) error{
		"nodemgr": func(dst string) error { return r.nodemgr("cp", "--via", "rsync", src, "vm-1:"+dst) },
		"rsync":   rsync(rsh),
		"rsyncCM": rsync(rshCM),
	}
	kinds := []string{"nodemgr", "rsync", "rsyncCM"}
	for _, k := range kinds { // warm up, and check that the copies are right
		dst := filepath.Join(out, "warm-"+k)
		if err := copies[k](dst); err != nil {
			b.Fatalf("%s: %v", k, err)
		}
		if diff := cmp.Diff(want, executetest.Listing(b, dst)); diff != "" {
			b.Fatalf("%s: the copy differs from the source (-want +got):\n%s", k, diff)
		}
	}
	tm := timings{}
	round := 0
	for b.Loop() {
		round++
		for _, k := range kinds {
			dst := filepath.Join(out, k+strconv.Itoa(round))
			if k != "nodemgr" { // plain rsync makes no parents
				if err := os.Mkdir(dst, 0o755); err != nil {
					b.Fatal(err)
				}
				dst = filepath.Join(dst, "copy")
			}
			tm.time(b, k+"-first", func() error { return copies[k](dst) })
			tm.time(b, k+"-unchanged", func() error { return copies[k](dst) })
		}
	}
	tm.report(b, map[string][2]string{
		"ratio-first":        {"nodemgr-first", "rsync-first"},
		"ratio-unchanged":    {"nodemgr-unchanged", "rsync-unchanged"},
		"ratio-first-vs-cm":  {"nodemgr-first", "rsyncCM-first"},
		"ratio-unchgd-vs-cm": {"nodemgr-unchanged", "rsyncCM-unchanged"},
	})
}

func command(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, out)
	}
	return nil
}
