package hw

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// gpuTimeout bounds nvidia-smi, which can hang on a wedged driver.
var gpuTimeout = 5 * time.Second

// detectGPUs lists NVIDIA GPUs with nvidia-smi. Without nvidia-smi on PATH
// there are no GPUs to report, and that is not an error. The slice is never
// nil, so the wire form is [] rather than null.
func detectGPUs(ctx context.Context) ([]api.GPU, error) {
	none := []api.GPU{}
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return none, nil
	}
	ctx, cancel := context.WithTimeout(ctx, gpuTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path,
		"--query-gpu=index,uuid,name,memory.total,driver_version",
		"--format=csv,noheader,nounits")
	cmd.WaitDelay = time.Second // in case a child of it keeps the pipes open
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// Installed tools with no GPU in the machine (or none visible to
		// this container): nvidia-smi says so and exits non-zero.
		if bytes.Contains(stdout.Bytes(), []byte("No devices were found")) ||
			bytes.Contains(stderr.Bytes(), []byte("No devices were found")) {
			return none, nil
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("%w (limit %v)", ctx.Err(), gpuTimeout)
		case ctx.Err() != nil:
			err = ctx.Err()
		}
		// nvidia-smi writes its complaints (e.g. "couldn't communicate with
		// the NVIDIA driver") to stdout as often as to stderr.
		if msg := firstLine(stderr.String(), stdout.String()); msg != "" {
			return none, fmt.Errorf("run nvidia-smi: %w: %s", err, msg)
		}
		return none, fmt.Errorf("run nvidia-smi: %w", err)
	}
	gpus, err := parseNvidiaSMI(stdout.Bytes())
	if err != nil {
		return none, err
	}
	return gpus, nil
}

// firstLine returns the first non-blank line among outs, shortened.
func firstLine(outs ...string) string {
	for _, out := range outs {
		for line := range strings.Lines(out) {
			if line = strings.TrimSpace(line); line != "" {
				if len(line) > 200 {
					line = line[:200] + "..."
				}
				return line
			}
		}
	}
	return ""
}

// parseNvidiaSMI parses the output of
//
//	nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits
//
// one GPU a line, memory in MiB. Values nvidia-smi cannot give, such as
// "[N/A]" or "[Not Supported]", are left zero or empty.
func parseNvidiaSMI(out []byte) ([]api.GPU, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.FieldsPerRecord = 5
	r.TrimLeadingSpace = true
	r.LazyQuotes = true // GPU names are not quoted and could hold a quote
	gpus := []api.GPU{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return gpus, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi output: %w", err)
		}
		line, _ := r.FieldPos(0)
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
			if strings.HasPrefix(rec[i], "[") && strings.HasSuffix(rec[i], "]") {
				rec[i] = ""
			}
		}
		g := api.GPU{UUID: rec[1], Name: rec[2], Driver: rec[4]}
		if g.Index, err = strconv.Atoi(rec[0]); err != nil || g.Index < 0 {
			return nil, fmt.Errorf("parse nvidia-smi output: line %d: bad index %q", line, rec[0])
		}
		if rec[3] != "" {
			mib, err := strconv.ParseUint(rec[3], 10, 64)
			if err != nil || mib > math.MaxUint64>>20 {
				return nil, fmt.Errorf("parse nvidia-smi output: line %d: bad memory.total %q", line, rec[3])
			}
			g.MemoryBytes = mib << 20
		}
		gpus = append(gpus, g)
	}
}
