package rsync_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/rsync"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
)

// BenchmarkCopyVsRsync copies the same tree to the test sshd, side by
// side in each round: with the executor (CopyToStats: its check over the
// kept ssh connection, then rsync) and with plain rsync over the same
// ssh_config, each a first copy into a fresh directory and an unchanged
// second copy. It reports the median of each (-benchtime=50x for 50
// rounds) and the executor's ratios.
//
//	go test ./internal/drivers/execute/rsync -run '^$' -bench CopyVsRsync -benchtime 50x
func BenchmarkCopyVsRsync(b *testing.B) {
	r, d, srv := node(b, nil)
	rsyncBin, sshBin := must(exec.LookPath("rsync")), must(exec.LookPath("ssh"))
	// The ssh_config the executor writes for d.
	s, err := ssh.New(srv.Settings())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t, err := s.Target(d)
	if err != nil {
		b.Fatal(err)
	}
	body, err := rsync.SSHConfig(t)
	if err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(b.TempDir(), "ssh_config")
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	src := executetest.BenchTree(b, b.TempDir())
	ctx := context.Background()
	out := b.TempDir() // the machine is this host

	plain := func(dst string) error {
		c := exec.Command(rsyncBin, "-rlpt", "-s", "--stats", "-e", sshBin+" -F "+cfg, "--", src+"/", "nodemgr-target:"+dst+"/")
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

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
