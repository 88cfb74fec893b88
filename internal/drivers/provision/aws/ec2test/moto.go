package ec2test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Moto is a moto server (python3 -m moto.server) on 127.0.0.1, shared by
// the tests of one test binary.
type Moto struct {
	// URL is the endpoint, for the provider's endpoint setting.
	URL string

	cmd    *exec.Cmd
	exited chan error // Wait's answer
	stderr *bytes.Buffer
}

var moto struct {
	once sync.Once
	m    *Moto
	err  error
}

// StartMoto returns the test binary's moto server, starting it on first
// use, reset to moto's defaults (POST /moto-api/reset), and sets the
// test's environment as Env does. Where moto cannot start, the test is
// skipped, or fails when NODEMGR_REQUIRE_MOTO=1 (as CI sets).
// NODEMGR_MOTO_PYTHON names the Python that has moto; default python3.
// Call StopMoto from TestMain once the tests have run.
func StartMoto(t testing.TB) *Moto {
	t.Helper()
	Env(t)
	moto.once.Do(func() { moto.m, moto.err = startMoto() })
	if moto.err != nil {
		msg := fmt.Sprintf("no moto server: %v", moto.err)
		if os.Getenv("NODEMGR_REQUIRE_MOTO") == "1" {
			t.Fatalf("%s (NODEMGR_REQUIRE_MOTO=1)", msg)
		}
		t.Skipf("%s; set NODEMGR_REQUIRE_MOTO=1 to fail instead", msg)
	}
	moto.m.Reset(t)
	return moto.m
}

// StopMoto stops the moto server StartMoto started, if it did.
func StopMoto() {
	if m := moto.m; m != nil {
		m.cmd.Process.Kill()
		<-m.exited
	}
}

func startMoto() (*Moto, error) {
	python := os.Getenv("NODEMGR_MOTO_PYTHON")
	if python == "" {
		python = "python3"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	m := &Moto{URL: "http://127.0.0.1:" + strconv.Itoa(port), stderr: &bytes.Buffer{}}
	m.cmd = exec.Command(python, "-m", "moto.server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	m.cmd.Stdout = m.stderr
	m.cmd.Stderr = m.stderr
	m.cmd.SysProcAttr = sysProcAttr()
	// moto's botocore reads the AWS environment too, and a test's (Env)
	// is not for it. AMI validation makes moto refuse an unknown image
	// as EC2 does.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			m.cmd.Env = append(m.cmd.Env, kv)
		}
	}
	m.cmd.Env = append(m.cmd.Env, "MOTO_ENABLE_AMI_VALIDATION=true")
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s -m moto.server: %w", python, err)
	}
	m.exited = make(chan error, 1)
	go func() { m.exited <- m.cmd.Wait() }()

	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-m.exited:
			return nil, fmt.Errorf("%s -m moto.server exited (%v): %s", python, err, tail(m.stderr.String()))
		case <-time.After(100 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.URL+"/moto-api/", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			return m, nil
		}
	}
	m.cmd.Process.Kill()
	<-m.exited
	return nil, fmt.Errorf("%s -m moto.server did not answer on %s within a minute: %s", python, m.URL, tail(m.stderr.String()))
}

// Reset puts moto back to its defaults: no instances, its own AMIs.
func (m *Moto) Reset(t testing.TB) {
	t.Helper()
	resp, err := http.Post(m.URL+"/moto-api/reset", "application/json", nil)
	if err != nil {
		t.Fatalf("reset moto: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reset moto: %s", resp.Status)
	}
}

// Settings are the aws provider's settings for this endpoint; states are
// polled every 10ms.
func (m *Moto) Settings() map[string]string {
	return map[string]string{"region": Region, "endpoint": m.URL, "poll_interval": "10ms", "wait_timeout": "1m"}
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
