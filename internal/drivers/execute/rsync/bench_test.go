package rsync_test

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

	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh/sshtest"
)

// BenchmarkCopyVsRsync copies the same tree to the test sshd, side by
// side in each round: with the executor (CopyToStats: its check and rsync,
// both over the kept ssh connection) and with plain rsync over a fresh
// OpenSSH ssh, each a first copy into a fresh directory and an unchanged
// second copy. It reports the median of each (-benchtime=50x for 50
// rounds) and the executor's ratios.
//
//	go test ./internal/drivers/execute/rsync -run '^$' -bench CopyVsRsync -benchtime 50x
func BenchmarkCopyVsRsync(b *testing.B) {
	r, d, srv := node(b, nil)
	rsyncBin := sshtest.Need(b, "rsync")
	host, port, _ := net.SplitHostPort(srv.Addr)
	// rsync -e splits on blanks: none of these has one.
	rsh := strings.Join([]string{sshtest.Need(b, "ssh"), "-F", "/dev/null", "-p", port, "-i", srv.Identity, "-l", srv.User,
		"-o", "UserKnownHostsFile=" + srv.KnownHosts, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"}, " ")
	src := executetest.BenchTree(b, b.TempDir())
	ctx := context.Background()
	out := b.TempDir() // the machine is this host

	plain := func(dst string) error {
		c := exec.Command(rsyncBin, "-rlpt", "-s", "--stats", "-e", rsh, "--", src+"/", host+":"+dst+"/")
		if o, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, o)
		}
		return nil
	}
	nodemgr := func(dst string, files int) error {
		st, err := r.CopyToStats(ctx, d, src, dst)
		if err == nil && st.Files != files {
			err = fmt.Errorf("sent %d files, want %d", st.Files, files)
		}
		return err
	}
	took := map[string][]time.Duration{}
	timeIt := func(k string, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatalf("%s: %v", k, err)
		}
		took[k] = append(took[k], time.Since(start))
	}
	const files = executetest.BenchTreeFiles
	round := 0
	for b.Loop() {
		round++
		a, p := filepath.Join(out, "n"+strconv.Itoa(round)), filepath.Join(out, "p"+strconv.Itoa(round))
		if err := os.Mkdir(p, 0o755); err != nil { // plain rsync makes no parents
			b.Fatal(err)
		}
		p = filepath.Join(p, "copy")
		timeIt("nodemgr-first", func() error { return nodemgr(a, files) })
		timeIt("rsync-first", func() error { return plain(p) })
		timeIt("nodemgr-unchanged", func() error { return nodemgr(a, 0) })
		timeIt("rsync-unchanged", func() error { return plain(p) })
		os.RemoveAll(a)
		os.RemoveAll(filepath.Dir(p))
	}
	p50 := map[string]time.Duration{}
	for k, ds := range took {
		s := slices.Clone(ds)
		slices.Sort(s)
		p50[k] = s[len(s)/2]
		b.ReportMetric(float64(p50[k].Microseconds())/1000, k+"-p50-ms")
	}
	b.ReportMetric(float64(p50["nodemgr-first"])/float64(p50["rsync-first"]), "ratio-first")
	b.ReportMetric(float64(p50["nodemgr-unchanged"])/float64(p50["rsync-unchanged"]), "ratio-unchanged")
}
