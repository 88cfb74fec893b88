package server

import (
	"context"
	"crypto/x509"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

func BenchmarkZZExecParts(b *testing.B) {
	r := newSSHRig(b)
	var addr, token, ca string
	for _, kv := range r.env {
		if v, ok := strings.CutPrefix(kv, "NODEMGR_ADDR="); ok {
			addr = v
		}
		if v, ok := strings.CutPrefix(kv, "NODEMGR_TOKEN="); ok {
			token = v
		}
		if v, ok := strings.CutPrefix(kv, "NODEMGR_CA_CERT="); ok {
			ca = v
		}
	}
	pem, _ := os.ReadFile(ca)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	ctx := context.Background()
	kept := client.New(addr, token, client.WithRootCAs(roots))
	run := map[string]func() error{
		"fresh-client": func() error {
			c := client.New(addr, token, client.WithRootCAs(roots))
			_, err := c.Exec(ctx, "vm-1", api.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard)
			return err
		},
		"kept-client": func() error {
			_, err := kept.Exec(ctx, "vm-1", api.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard)
			return err
		},
		"fresh-whoami": func() error {
			c := client.New(addr, token, client.WithRootCAs(roots))
			_, err := c.Whoami(ctx)
			return err
		},
	}
	run["cli-version"] = func() error { return r.nodemgr("--version") }
	run["cli-whoami"] = func() error { return r.nodemgr("whoami") }
	run["cli-exec"] = func() error { return r.nodemgr("exec", "vm-1", "--", "true") }
	run["cli-exec-nostdin"] = func() error { return r.nodemgr("exec", "--no-stdin", "vm-1", "--", "true") }
	kinds := []string{"fresh-client", "kept-client", "fresh-whoami", "cli-version", "cli-whoami", "cli-exec", "cli-exec-nostdin"}
	for _, k := range kinds {
		if err := run[k](); err != nil {
			b.Fatal(k, err)
		}
	}
	tm := timings{}
	for b.Loop() {
		for _, k := range kinds {
			tm.time(b, k, run[k])
		}
		time.Sleep(time.Millisecond)
	}
	tm.report(b, nil)
}
