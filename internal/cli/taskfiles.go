package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/humansize"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

// uploader sends a submit's input files to the server's blob store, each
// distinct file once, and remembers what it sent.
type uploader struct {
	c     *client.Client
	e     *env
	done  map[string]api.TaskFile // local path → input
	sent  int
	had   int
	bytes int64
}

func newUploader(c *client.Client, e *env) *uploader {
	return &uploader{c: c, e: e, done: map[string]api.TaskFile{}}
}

// expand turns --input arguments (paths or globs relative to the current
// directory; a directory stands for the files below it) into inputs.
func (u *uploader) expand(ctx context.Context, patterns []string) ([]api.TaskFile, error) {
	var rels []string
	seen := map[string]bool{}
	for _, p := range patterns {
		if err := localRelative("--input", p); err != nil {
			return nil, err
		}
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("--input %q: %w", p, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("--input %q matches no file here (%s); paths are relative to the current directory", p, mustGetwd())
		}
		for _, m := range matches {
			err := filepath.WalkDir(m, func(f string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel := filepath.ToSlash(filepath.Clean(f))
				if seen[rel] {
					return nil
				}
				seen[rel] = true
				rels = append(rels, rel)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return u.files(ctx, rels)
}

// fill uploads the inputs of tasks read from a file that name a local
// path without a digest.
func (u *uploader) fill(ctx context.Context, tasks []api.TaskSpec) error {
	var rels []string
	fields := map[string]string{} // a path's first field, for its error
	for i := range tasks {
		for j, in := range tasks[i].Inputs {
			if in.Digest != "" {
				continue
			}
			field := fmt.Sprintf("task %d: inputs[%d]", i+1, j)
			// Sent as it is written, so checked as the server will.
			if err := validate.SandboxPath(field, in.Path); err != nil {
				return err
			}
			if _, ok := fields[in.Path]; !ok {
				fields[in.Path] = field
			}
			rels = append(rels, in.Path)
		}
	}
	if _, err := u.files(ctx, rels); err != nil {
		if fe := (*client.FileError)(nil); errors.As(err, &fe) && fields[fe.File.Rel] != "" {
			return fmt.Errorf("%s: %w", fields[fe.File.Rel], fe.Err)
		}
		return err
	}
	for i := range tasks {
		for j, in := range tasks[i].Inputs {
			if in.Digest != "" {
				continue
			}
			got := u.done[in.Path]
			if in.Mode != 0 {
				got.Mode = in.Mode
			}
			tasks[i].Inputs[j] = got
		}
	}
	return nil
}

// files uploads local files (slash paths relative to the current
// directory), a few at once, but those this submit or the server has
// already, and returns them as inputs, in order.
func (u *uploader) files(ctx context.Context, rels []string) ([]api.TaskFile, error) {
	var todo []client.LocalFile
	queued := map[string]bool{}
	for _, rel := range rels {
		if _, ok := u.done[rel]; !ok && !queued[rel] {
			queued[rel] = true
			todo = append(todo, client.LocalFile{Path: filepath.FromSlash(rel), Rel: rel})
		}
	}
	_, err := u.c.UploadFiles(ctx, todo, func(up client.Uploaded) {
		if up.Sent {
			u.sent++
			u.bytes += up.Input.Size
		} else {
			u.had++
		}
		u.done[up.Input.Path] = up.Input
		if n := u.sent + u.had; n%50 == 0 {
			redraw(u.e.rawErr(), fmt.Sprintf("input files: %d checked, %d uploaded (%s)", n, u.sent, sizeString(u.bytes)))
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]api.TaskFile, len(rels))
	for i, rel := range rels {
		out[i] = u.done[rel]
	}
	return out, nil
}

// report says what went up, when anything was looked at.
func (u *uploader) report() {
	if n := u.sent + u.had; n > 0 {
		redraw(u.e.rawErr(), fmt.Sprintf("input files: %d uploaded (%s), %d already on the server", u.sent, sizeString(u.bytes), u.had))
		fmt.Fprintln(u.e.stderr)
	}
}

// localRelative refuses --input paths and globs that leave the current
// directory: the files they name keep their paths in the task's sandbox.
// An unclean one ("./src/*.c", as a shell completes it) is fine here: the
// paths sent are those of the files found, cleaned, and the server checks
// them with validate.SandboxPath.
func localRelative(field, p string) error {
	if !filepath.IsLocal(p) {
		return fmt.Errorf("%s %q: give a path relative to the current directory and inside it (it is the file's path in the task's sandbox too); cd to the project's root first", field, p)
	}
	return nil
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	return wd
}

// parseInputFrom reads TASK[:PATH[=AS]].
func parseInputFrom(s string) (api.InputFrom, error) {
	task, rest, _ := strings.Cut(s, ":")
	if task == "" {
		return api.InputFrom{}, usagef("--input-from %q: give TASK, TASK:PATH or TASK:PATH=AS", s)
	}
	p, as, _ := strings.Cut(rest, "=")
	return api.InputFrom{Task: task, Path: p, As: as}, nil
}

// sizeString prints a byte count for people.
func sizeString(n int64) string { return humansize.Bytes(n) }

// fetcher downloads task outputs into a directory, with progress.
type fetcher struct {
	c     *client.Client
	e     *env
	dest  string
	files int
	bytes int64
	total int64
	where map[string]string // path → digest written there
	start time.Time
}

func newFetcher(c *client.Client, e *env, dest string, total int64) *fetcher {
	return &fetcher{c: c, e: e, dest: dest, total: total, where: map[string]string{}, start: time.Now()}
}

// task downloads the outputs of one task's result.
func (f *fetcher) task(ctx context.Context, tk api.Task) error {
	if tk.Result == nil {
		return nil
	}
	for _, out := range tk.Result.Outputs {
		if d, ok := f.where[out.Path]; ok {
			if d != out.Digest {
				fmt.Fprintf(f.e.stderr, "warning: %s comes from several tasks with different content; task %s's copy wins\n", out.Path, tk.ID)
			} else {
				continue
			}
		}
		if err := f.file(ctx, tk.ID, out); err != nil {
			return fmt.Errorf("task %s output %s: %w", tk.ID, out.Path, err)
		}
		f.where[out.Path] = out.Digest
	}
	return nil
}

func (f *fetcher) file(ctx context.Context, task string, out api.TaskFile) error {
	if err := validate.SandboxPath("output", out.Path); err != nil {
		return err
	}
	dst := filepath.Join(f.dest, filepath.FromSlash(out.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	rc, _, err := f.c.TaskOutput(ctx, task, out.Path)
	if err != nil {
		return err
	}
	defer rc.Close()
	mode := os.FileMode(out.Mode)
	if mode == 0 {
		mode = 0o644
	}
	tmp := dst + ".nodemgr-part"
	w, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(w, &progressReader{r: rc, f: f})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != out.Size {
		err = fmt.Errorf("got %d bytes, want %d", n, out.Size)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	f.files++
	return os.Rename(tmp, dst)
}

// progressReader counts bytes and redraws the progress line now and then.
type progressReader struct {
	r    io.Reader
	f    *fetcher
	last time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.f.bytes += int64(n)
	if time.Since(p.last) > 200*time.Millisecond && p.f.total > 1<<20 {
		p.last = time.Now()
		redraw(p.f.e.rawErr(), fmt.Sprintf("fetched %s of %s", sizeString(p.f.bytes), sizeString(p.f.total)))
	}
	return n, err
}

func (f *fetcher) done() {
	if f.total > 1<<20 {
		fmt.Fprintln(f.e.stderr)
	}
	fmt.Fprintf(f.e.stdout, "fetched %d files (%s) into %s in %s\n", f.files, sizeString(f.bytes), f.dest, time.Since(f.start).Round(time.Millisecond))
}

func outputsSize(tasks ...api.Task) int64 {
	var n int64
	for _, tk := range tasks {
		if tk.Result != nil {
			for _, o := range tk.Result.Outputs {
				n += o.Size
			}
		}
	}
	return n
}

func taskGetCmd(e *env) *cobra.Command {
	var dest string
	cmd := &cobra.Command{
		Use:   "get TASK [--dest DIR]",
		Short: "Download a task's output files",
		Long: `Download the output files of a task's result into DIR (default: the current
directory), at their paths relative to the task's sandbox.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := clientFor(cmd, e)
			tk, err := c.Task(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if tk.Result == nil || len(tk.Result.Outputs) == 0 {
				return fmt.Errorf("task %s has no output files (it is %s); a task lists its outputs with --output GLOB at submit", tk.ID, tk.State)
			}
			return fetchOutputs(cmd.Context(), c, e, dest, tk)
		},
	}
	cmd.Flags().StringVar(&dest, "dest", ".", "directory to write the files into")
	return cmd
}

func suiteFetchCmd(e *env) *cobra.Command {
	var dest string
	cmd := &cobra.Command{
		Use:   "fetch SUITE [--dest DIR]",
		Short: "Download the output files of a suite's finished tasks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := clientFor(cmd, e)
			tasks, err := client.All(cmd.Context(), func(ctx context.Context, p client.Page) ([]api.Task, string, error) {
				l, err := c.TasksFiltered(ctx, args[0], client.TaskFilter{State: api.TaskFinished}, p)
				return l.Tasks, l.Next, err
			})
			if err != nil {
				return err
			}
			sort.SliceStable(tasks, func(i, j int) bool { return tasks[i].CreatedAt.Before(tasks[j].CreatedAt) })
			return fetchOutputs(cmd.Context(), c, e, dest, tasks...)
		},
	}
	cmd.Flags().StringVar(&dest, "dest", ".", "directory to write the files into")
	return cmd
}

// fetchOutputs downloads the output files of tasks into dest, one task
// after the other, with progress for their total size.
func fetchOutputs(ctx context.Context, c *client.Client, e *env, dest string, tasks ...api.Task) error {
	f := newFetcher(c, e, dest, outputsSize(tasks...))
	for _, tk := range tasks {
		if err := f.task(ctx, tk); err != nil {
			return err
		}
	}
	f.done()
	return nil
}

// suiteOutcome is nil when no task of the suite failed or was cancelled
// and the suite was not cancelled; otherwise an error that says what to
// look at, so that scripts can run `nodemgr suite wait S && next-step`.
func suiteOutcome(s api.Suite) error {
	c := s.Counts
	switch {
	case s.State == api.SuiteCancelled:
		return fmt.Errorf("suite %s was cancelled (%d finished, %d failed, %d cancelled)", s.Name, c.Finished, c.Failed, c.Cancelled)
	case c.Failed > 0 || c.Cancelled > 0:
		return fmt.Errorf("suite %s: %d task(s) failed, %d cancelled, %d finished; see nodemgr task ls --suite %s --state Failed",
			s.Name, c.Failed, c.Cancelled, c.Finished, s.Name)
	}
	return nil
}

// settled says whether every task submitted so far has ended.
func settled(s api.Suite) bool {
	c := s.Counts
	return s.State == api.SuiteComplete || s.State == api.SuiteCancelled || c.Pending+c.Ready+c.Running == 0 && c.Total() > 0
}

func suiteWaitCmd(e *env) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait SUITE",
		Short: "Wait until every task submitted to a suite has ended; fail if any failed",
		Long: `Wait until every task submitted to the suite so far has ended (the suite may
stay Open for more), or the suite ends. Exits non-zero when a task failed or
was cancelled, or the suite was cancelled, so that
	nodemgr suite wait build && ./deploy
is safe in scripts.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			c := clientFor(cmd, e)
			var s api.Suite
			for etag := ""; ; {
				got, tag, changed, err := nextSuiteChange(ctx, c, args[0], etag, 30*time.Second)
				if ctx.Err() != nil && etag != "" {
					return fmt.Errorf("suite %s: still %d pending, %d ready, %d running after %v", s.Name,
						s.Counts.Pending, s.Counts.Ready, s.Counts.Running, timeout)
				}
				if err != nil {
					return err
				}
				if changed {
					s, etag = got, tag
				}
				if settled(s) {
					return suiteOutcome(s)
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait as long as it takes)")
	return cmd
}

// nextSuiteChange is client.SuiteChange: the suite once it differs from
// the answer of etag, or after wait. A server too old to wait answers at
// once without an ETag: then it paces the asking itself.
func nextSuiteChange(ctx context.Context, c *client.Client, ref, etag string, wait time.Duration) (api.Suite, string, bool, error) {
	s, tag, changed, err := c.SuiteChange(ctx, ref, etag, wait)
	if err == nil && tag == "" && etag != "" {
		select {
		case <-ctx.Done():
		case <-time.After(min(wait, 100*time.Millisecond)):
		}
	}
	return s, tag, changed, err
}
