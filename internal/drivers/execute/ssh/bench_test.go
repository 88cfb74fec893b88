package ssh_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
)

// BenchmarkExecVsOpenSSH runs true on the test sshd, side by side in each
// round: with the executor (its connection kept from round to round), with
// a fresh OpenSSH client (a connection each time, as `ssh host true`), and
// with an OpenSSH client reusing a ControlMaster connection. It reports
// the median of each (-benchtime=50x for 50 rounds) and the executor's
// ratio to each.
//
//	go test ./internal/drivers/execute/ssh -run '^$' -bench ExecVsOpenSSH -benchtime 50x
func BenchmarkExecVsOpenSSH(b *testing.B) {
	e, d, srv := node(b, nil)
	sshBin := sshtest.Need(b, "ssh")
	host, port, _ := net.SplitHostPort(srv.Addr)
	cm := filepath.Join(b.TempDir(), "cm")
	base := []string{"-F", "/dev/null", "-p", port, "-i", srv.Identity, "-l", srv.User,
		"-o", "UserKnownHostsFile=" + srv.KnownHosts, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"}
	master := append(slices.Clone(base), "-o", "ControlMaster=auto", "-o", "ControlPath="+cm, "-o", "ControlPersist=60")
	defer exec.Command(sshBin, append(slices.Clone(master), "-O", "exit", host)...).Run()

	ctx := context.Background()
	kinds := []string{"nodemgr", "openssh", "openssh-controlmaster"}
	run := map[string]func() error{
		"nodemgr": func() error {
			code, err := e.Exec(ctx, d, execute.Command{Argv: []string{"true"}})
			if err == nil && code != 0 {
				err = fmt.Errorf("exit %d", code)
			}
			return err
		},
		"openssh":               func() error { return command(sshBin, append(slices.Clone(base), host, "true")...) },
		"openssh-controlmaster": func() error { return command(sshBin, append(slices.Clone(master), host, "true")...) },
	}
	// Warm up: the executor's connection, the master, the page cache.
	for _, k := range kinds {
		if err := run[k](); err != nil {
			b.Fatalf("%s: %v", k, err)
		}
	}
	took := map[string][]time.Duration{}
	for b.Loop() {
		for _, k := range kinds {
			start := time.Now()
			if err := run[k](); err != nil {
				b.Fatalf("%s: %v", k, err)
			}
			took[k] = append(took[k], time.Since(start))
		}
	}
	p50 := map[string]time.Duration{}
	for _, k := range kinds {
		p50[k] = median(took[k])
		b.ReportMetric(float64(p50[k].Microseconds())/1000, k+"-p50-ms")
	}
	b.ReportMetric(float64(p50["nodemgr"])/float64(p50["openssh"]), "ratio-vs-openssh")
	b.ReportMetric(float64(p50["nodemgr"])/float64(p50["openssh-controlmaster"]), "ratio-vs-controlmaster")
}

func command(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
