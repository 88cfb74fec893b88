package tasklog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSmallOutputStaysInMemory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.1.log")
	w := NewWriter(p, 1<<20, 100)
	w.Write(Stdout, []byte("hello\n"))
	w.Write(Stderr, []byte("warn\n"))
	if !w.Pending() {
		t.Fatal("output within the tails is not pending")
	}
	w.Close()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("a log file was made for output within the tails: %v", err)
	}
}

func TestOutputBeyondATailMakesTheFileInOrder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.1.log")
	w := NewWriter(p, 1<<20, 100)
	w.Write(Stdout, []byte("first\n"))
	w.Write(Stderr, []byte("second\n"))
	big := bytes.Repeat([]byte("x"), 150)
	w.Write(Stdout, big)
	w.Write(Stderr, []byte("last\n"))
	w.Close()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("no log file after a stream outgrew its tail: %v", err)
	}
	defer f.Close()
	b, err := ReadFrames(f, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := Text(b, nil)
	if want := "first\nsecond\n" + string(big) + "last\n"; string(all) != want {
		t.Fatalf("log = %q, want %q", all, want)
	}
	errs, _ := Text(b, func(s Stream) bool { return s == Stderr })
	if string(errs) != "second\nlast\n" {
		t.Fatalf("stderr = %q", errs)
	}
	out, errn, err := Totals(p)
	if err != nil || out != 156 || errn != 12 {
		t.Fatalf("Totals = %d, %d, %v; want 156, 12", out, errn, err)
	}
}

func TestOpenMakesTheFileForFollowers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.1.log")
	w := NewWriter(p, 1<<20, 100)
	w.Write(Stdout, []byte("a\n"))
	w.Open()
	w.Write(Stdout, []byte("b\n"))
	defer w.Close()
	b, _ := os.ReadFile(p)
	text, err := Text(b, nil)
	if err != nil || string(text) != "a\nb\n" {
		t.Fatalf("followed log = %q, %v", text, err)
	}
}

func TestCapKeepsANotice(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.1.log")
	w := NewWriter(p, 10, 4)
	w.Write(Stdout, []byte("0123456"))
	w.Write(Stdout, []byte("789abc"))
	w.Write(Stdout, []byte("never"))
	w.Close()
	b, _ := os.ReadFile(p)
	text, _ := Text(b, nil)
	if !strings.HasPrefix(string(text), "0123456789\n[nodemgr: output beyond 10 bytes was not kept") || strings.Contains(string(text), "never") {
		t.Fatalf("capped log = %q", text)
	}
}

func TestReadFramesStopsBeforeAFrameCutShort(t *testing.T) {
	b := AppendFrame(nil, Stdout, []byte("whole"))
	cut := AppendFrame(nil, Stderr, []byte("half of it"))
	got, err := ReadFrames(bytes.NewReader(append(b, cut[:12]...)), 1<<20)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("ReadFrames = %q, %v; want the whole frame only", got, err)
	}
	if _, err := ReadFrames(bytes.NewReader([]byte("not a frame at all")), 100); err == nil {
		t.Fatal("a damaged log read without an error")
	}
}

func TestReadFramesTakesWholeFramesUpToMax(t *testing.T) {
	var b []byte
	for range 10 {
		b = AppendFrame(b, Stdout, []byte("0123456789"))
	}
	got, err := ReadFrames(bytes.NewReader(b), 30)
	if err != nil || len(got) != 2*(HeaderSize+10) {
		t.Fatalf("ReadFrames(max 30) = %d bytes, %v; want two whole frames (36)", len(got), err)
	}
}

func TestPathRefusesIDsThatAreNotNames(t *testing.T) {
	for _, id := range []string{"", "../x", "a/b", ".hidden"} {
		if p := Path("/d", id, 1); p != "" {
			t.Errorf("Path(%q) = %q, want none", id, p)
		}
	}
	if p := Path("/d", "t-1", 2); p != "/d/t-1.2.log" {
		t.Errorf("Path = %q", p)
	}
}
