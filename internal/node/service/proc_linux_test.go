package service

import (
	"os/exec"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	line := "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	st, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.state != 'S' || st.pgrp != 1234 || st.startTime != 987654 {
		t.Errorf("parseProcStat = %+v, want state S, pgrp 1234, start 987654", st)
	}
}

func TestWaitExit(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(pid int, start uint64, quit <-chan struct{}) bool
	}{
		{"pidfd", func(pid int, start uint64, quit <-chan struct{}) bool {
			return waitExit(pid, start, quit, time.Hour)
		}},
		{"poll", func(pid int, start uint64, quit <-chan struct{}) bool {
			return pollExit(pid, start, quit, 10*time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "300")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := cmd.Process.Pid
			start, err := procStartTime(pid)
			if err != nil {
				t.Fatal(err)
			}

			// quit ends the wait without an exit.
			quit := make(chan struct{})
			close(quit)
			if tc.wait(pid, start, quit) {
				t.Fatalf("wait reported an exit of a live process")
			}

			// A wrong start time is another process: already gone.
			if !tc.wait(pid, start+1, make(chan struct{})) {
				t.Errorf("wait on a recycled pid did not report it gone")
			}

			done := make(chan bool, 1)
			go func() { done <- tc.wait(pid, start, make(chan struct{})) }()
			cmd.Process.Kill()
			select {
			case exited := <-done:
				if !exited {
					t.Errorf("wait = false after the process was killed")
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("wait did not notice the exit")
			}
		})
	}
}
