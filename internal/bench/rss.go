package bench

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RSSConfig sets up the idle-agent memory harness.
type RSSConfig struct {
	Binary  string        // nodemgr binary: a server and an agent
	Against []string      // more binaries whose agents are measured beside it
	Idle    time.Duration // how long the agents sit connected before they are read
}

// RSSResult is one binary's idle agent as /proc shows it. File-backed
// pages are the binary's: which of them are resident depends on what the
// agent touched, and on the kernel mapping the neighbours of each page it
// faults in when they are in the page cache (fault-around, 64 KiB), so a
// few touches spread over a large binary cost more than their size.
type RSSResult struct {
	Binary string `json:"binary"`
	// Server is the binary the agent's server ran: Binary, or the harness's
	// own when Binary is an agent-only build without the server.
	Server  string `json:"server"`
	Size    int64  `json:"size"`     // bytes of the binary
	VmRSS   uint64 `json:"vm_rss"`   // resident bytes
	RssAnon uint64 `json:"rss_anon"` // heap, stacks, written data
	RssFile uint64 `json:"rss_file"` // pages of the binary
	// Where in the binary the resident file pages lie: machine code,
	// read-only data (type descriptors, strings, tables), the function
	// tables (.gopclntab: names, line and stack maps, funcdata) and the
	// initialized data not yet written. Zero where /proc/PID/pagemap
	// cannot be read.
	Text, Rodata, Pclntab, Data uint64
}

// RunRSS starts a server and an idle agent for each binary, all at once,
// lets them idle, and reads each agent's memory. An agent-only build
// (one without the server command) gets a server of cfg.Binary.
//
// Each agent runs from a copy of its binary that is not in the page
// cache, as after a reboot, so that what is resident is what the agent
// itself faulted in: the server, from the original file, shares none of
// it. Which neighbours of a touched page the kernel maps too depends on
// the page cache (readahead, fault-around, the size of the cached folios):
// a binary that was just written or read whole can show far more.
func RunRSS(ctx context.Context, cfg RSSConfig, progress io.Writer) ([]RSSResult, error) {
	dir, err := os.MkdirTemp("", "nodemgr-bench-rss-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bins := append([]string{cfg.Binary}, cfg.Against...)
	var rigs []*rig
	defer func() {
		for _, r := range rigs {
			r.close()
		}
	}()
	for i, bin := range bins {
		server := bin
		if !hasServer(ctx, bin) {
			server = cfg.Binary
		}
		agentBin := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(bin)))
		if err := coldCopy(bin, agentBin); err != nil {
			return nil, fmt.Errorf("copy %s: %w", bin, err)
		}
		fmt.Fprintf(progress, "starting the agent of %s (server %s)\n", bin, server)
		r, err := startRigWith(ctx, AgentsConfig{Binary: server}, agentBin, fmt.Sprintf("bench-rss-%d", i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		rigs = append(rigs, r)
	}
	fmt.Fprintf(progress, "agents idle for %s\n", cfg.Idle)
	if !sleep(ctx, cfg.Idle) {
		return nil, ctx.Err()
	}
	out := make([]RSSResult, len(rigs))
	for i, r := range rigs {
		res, err := agentRSS(r.agent.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bins[i], err)
		}
		res.Binary, res.Server = bins[i], r.binary
		if st, err := os.Stat(bins[i]); err == nil {
			res.Size = st.Size()
		}
		out[i] = res
	}
	return out, nil
}

// coldCopy copies the executable src to dst and drops dst from the page
// cache.
func coldCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return dropCache(out)
}

// hasServer reports whether bin has the server command. (`bin server
// --help` would not tell: for a command it lacks, it shows the root's help.)
func hasServer(ctx context.Context, bin string) bool {
	return exec.CommandContext(ctx, bin, "help", "server").Run() == nil
}

// agentRSS reads a process's memory from /proc/PID/status, and where its
// binary's resident pages lie from /proc/PID/maps and pagemap.
func agentRSS(pid int) (RSSResult, error) {
	var r RSSResult
	st, err := procStatus(pid)
	if err != nil {
		return r, err
	}
	r.VmRSS, r.RssAnon, r.RssFile = st["VmRSS"], st["RssAnon"], st["RssFile"]
	r.Text, r.Rodata, r.Pclntab, r.Data = binaryPages(pid)
	return r, nil
}

// binaryPages sums the resident file pages of the process's executable
// by the section they hold. It goes by file offset, so a position
// independent binary reads the same.
func binaryPages(pid int) (text, rodata, pclntab, data uint64) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return
	}
	ef, err := elf.Open(exe)
	if err != nil {
		return
	}
	defer ef.Close()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return
	}
	defer pm.Close()
	const page = 4096
	section := func(off uint64) *uint64 {
		for _, s := range ef.Sections {
			if s.Type == elf.SHT_NOBITS || s.Addr == 0 || off < s.Offset || off >= s.Offset+s.Size {
				continue
			}
			switch {
			case s.Name == ".text":
				return &text
			case s.Name == ".gopclntab":
				return &pclntab
			case s.Flags&elf.SHF_WRITE != 0:
				return &data
			default:
				return &rodata
			}
		}
		return nil
	}
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		fileOff, err3 := strconv.ParseUint(f[2], 16, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		entries := make([]byte, (end-start)/page*8)
		if _, err := pm.ReadAt(entries, int64(start/page*8)); err != nil {
			continue
		}
		for i := range (end - start) / page {
			e := binary.LittleEndian.Uint64(entries[i*8:])
			// Bit 63: present; bit 61: a file page (not a private copy).
			if e&(1<<63) == 0 || e&(1<<61) == 0 {
				continue
			}
			if sum := section(fileOff + i*page); sum != nil {
				*sum += page
			}
		}
	}
	return
}
