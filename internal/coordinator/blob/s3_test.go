package blob_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob/blobtest"
)

func newS3(t *testing.T, cfg blob.S3Config) *blob.S3 {
	t.Helper()
	s, err := blob.NewS3(ctxFor(t), cfg)
	if err != nil {
		t.Fatalf("NewS3(%+v) = %v", cfg, err)
	}
	return s
}

func TestConformanceS3Moto(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return newS3(t, blobtest.MotoS3(t)) })
}

// TestS3Layout: a blob is the object <prefix>sha256/<hex>, and keys under
// the prefix that are not blobs are not listed.
func TestS3Layout(t *testing.T) {
	cfg := blobtest.MotoS3(t)
	cfg.Prefix = "node mgr+blobs" // NewS3 adds the "/"; a touch's CopySource escapes the rest
	s := newS3(t, cfg)
	for range 2 { // the second is a touch
		if _, err := s.Put(ctxFor(t), strings.NewReader("hello"), blob.Digest{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	raw := blobtest.S3Client(t, cfg)
	key := "node mgr+blobs/sha256/" + helloHex
	out, err := raw.GetObject(ctxFor(t), &s3.GetObjectInput{Bucket: &cfg.Bucket, Key: &key})
	if err != nil {
		t.Fatalf("GetObject(%s) = %v", key, err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "hello" {
		t.Errorf("GetObject(%s) = %q, want hello", key, got)
	}
	if entries, _ := os.ReadDir(cfg.TempDir); len(entries) != 0 {
		t.Errorf("TempDir holds %d files after a Put, want none", len(entries))
	}
	for _, k := range []string{"node mgr+blobs/sha256/notes.txt", "node mgr+blobs/other/" + helloHex, "sha256/" + strings.Repeat("0", 64)} {
		if _, err := raw.PutObject(ctxFor(t), &s3.PutObjectInput{Bucket: &cfg.Bucket, Key: awssdk.String(k), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var listed []string
	s.Walk(ctxFor(t), func(i blob.Info) error { listed = append(listed, i.Digest.Hex()); return nil })
	if len(listed) != 1 || listed[0] != helloHex {
		t.Errorf("Walk listed %v, want only %s", listed, helloHex)
	}
}

// TestS3OpenChecksContent: an object changed behind the store's back
// fails the read that reaches its end.
func TestS3OpenChecksContent(t *testing.T) {
	cfg := blobtest.MotoS3(t)
	s := newS3(t, cfg)
	d := blob.Sum([]byte("hello"))
	key := cfg.Prefix + "sha256/" + d.Hex()
	if _, err := blobtest.S3Client(t, cfg).PutObject(ctxFor(t), &s3.PutObjectInput{Bucket: &cfg.Bucket, Key: &key, Body: strings.NewReader("HELLO")}); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Open(ctxFor(t), d)
	if err != nil {
		t.Fatalf("Open(%s) = %v", d, err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "changed outside nodemgr") {
		t.Errorf("reading a tampered %s = %v, want an error saying it changed", d, err)
	}
}

func TestNewS3Errors(t *testing.T) {
	cfg := blobtest.MotoS3(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	tests := []struct {
		name     string
		edit     func(c *blob.S3Config)
		class    error
		contains string
	}{
		{"no bucket", func(c *blob.S3Config) { c.Bucket = "" }, errdefs.ErrInvalid, "bucket"},
		{"bad endpoint", func(c *blob.S3Config) { c.Endpoint = "localhost:9000" }, errdefs.ErrInvalid, "not an http:// or https:// URL"},
		{"missing bucket", func(c *blob.S3Config) { c.Bucket = "no-such-bucket" }, errdefs.ErrNotFound, `bucket "no-such-bucket" at ` + cfg.Endpoint + " not found"},
		{"endpoint down", func(c *blob.S3Config) { c.Endpoint = closed }, errdefs.ErrUnavailable, "no answer from " + closed + " (check the endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.edit(&c)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := blob.NewS3(ctx, c)
			if !errors.Is(err, tc.class) || !strings.Contains(errdefs.Message(err), tc.contains) {
				t.Errorf("NewS3 = %v (%s), want %v saying %q", err, errdefs.Code(err), tc.class, tc.contains)
			}
		})
	}
}

// TestS3StoreDown: once the endpoint stops answering, operations fail
// as unavailable, naming it.
func TestS3StoreDown(t *testing.T) {
	cfg := blobtest.MotoS3(t)
	target, err := url.Parse(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	cfg.Endpoint = proxy.URL
	s := newS3(t, cfg)
	proxy.Close()

	d := blob.Sum([]byte("hello"))
	ops := map[string]func() error{
		"Put":  func() error { _, err := s.Put(ctxFor(t), strings.NewReader("hello"), blob.Digest{}, 0); return err },
		"Stat": func() error { _, err := s.Stat(ctxFor(t), d); return err },
		"Walk": func() error { return s.Walk(ctxFor(t), func(blob.Info) error { return nil }) },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "no answer from "+proxy.URL) {
			t.Errorf("%s with the endpoint down = %v, want ErrUnavailable naming %s", name, err, proxy.URL)
		}
	}
	if entries, _ := os.ReadDir(cfg.TempDir); len(entries) != 0 {
		t.Errorf("TempDir holds %d files after a failed Put, want none", len(entries))
	}
}
