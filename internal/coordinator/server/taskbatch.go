package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
)

// A task batch may be up to maxTaskBody, and its decoded tasks take about
// as much again, so the server bounds both: readTaskBatch decodes one task
// at a time from the wire (the request holds its tasks and a small read
// buffer, never the raw body besides), and submitBudget caps the bytes of
// all batches being received at once.

// readTaskBatch decodes {"tasks": [...]} from the body, validating each
// task as it comes. A body over maxTaskBody is ErrTooLarge (413).
func readTaskBatch(w http.ResponseWriter, r *http.Request) ([]api.TaskSpec, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxTaskBody))
	dec.DisallowUnknownFields()
	tasks, err := decodeTaskBatch(dec)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, errdefs.TooLarge("body", "larger than %d MiB; send the tasks in several batches", maxTaskBody>>20)
	}
	return tasks, err
}

func decodeTaskBatch(dec *json.Decoder) ([]api.TaskSpec, error) {
	if err := expectDelim(dec, '{', "body", "a JSON object"); err != nil {
		return nil, err
	}
	var tasks []api.TaskSpec
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, decodeError(err, "body")
		}
		if key, _ := tok.(string); key != "tasks" {
			return nil, errdefs.Field(fmt.Sprint(tok), "unknown field")
		}
		if seen {
			return nil, errdefs.Field("tasks", "given twice")
		}
		seen = true
		if err := expectDelim(dec, '[', "tasks", "an array of tasks"); err != nil {
			return nil, err
		}
		for dec.More() {
			field := fmt.Sprintf("tasks[%d]", len(tasks))
			if len(tasks) == dispatch.MaxTasksPerCall {
				return nil, errdefs.Field("tasks", "at most %d tasks per call; send several batches", dispatch.MaxTasksPerCall)
			}
			var t api.TaskSpec
			if err := dec.Decode(&t); err != nil {
				return nil, decodeError(err, field)
			}
			if err := dispatch.ValidateTask(field, t); err != nil {
				return nil, err
			}
			tasks = append(tasks, t)
		}
		if err := expectDelim(dec, ']', "tasks", "the end of the array"); err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}', "body", "the end of the object"); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errdefs.Field("body", "trailing data after the JSON object")
	}
	if len(tasks) == 0 {
		return nil, errdefs.Field("tasks", "give at least one task")
	}
	return tasks, nil
}

func expectDelim(dec *json.Decoder, want json.Delim, field, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return decodeError(err, field)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return errdefs.Field(field, "must be %s, got %v", what, tok)
	}
	return nil
}

// decodeError names the field of a decoding error, below field.
func decodeError(err error, field string) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) || errors.Is(err, io.ErrUnexpectedEOF) && field == "" {
		return err
	}
	var fe *errdefs.FieldError
	if errors.As(httpapi.DecodeError(err), &fe) {
		if fe.Field == "body" {
			return errdefs.Field(field, "%s", fe.Reason)
		}
		return errdefs.Field(field+"."+fe.Field, "%s", fe.Reason)
	}
	return errdefs.Field(field, "%v", err)
}

// byteBudget is a counting semaphore of bytes: the task batches being
// received at once may not hold more than its size.
type byteBudget struct {
	mu    sync.Mutex
	free  int64
	freed chan struct{} // closed and replaced whenever bytes come back
}

func newByteBudget(size int64) *byteBudget {
	return &byteBudget{free: size, freed: make(chan struct{})}
}

// acquire takes n bytes, waiting at most wait for them; it fails with
// ErrUnavailable (503) when they do not come back in time.
func (b *byteBudget) acquire(ctx context.Context, n int64, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return fmt.Errorf("the server is receiving as many task batches as it holds at once; retry in a few seconds: %w", errdefs.ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.free += n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// batchReservation is what a task batch reserves of the budget: its
// declared length, or the most a batch may be when it declares none.
func batchReservation(r *http.Request) int64 {
	if r.ContentLength > 0 && r.ContentLength <= maxTaskBody {
		return r.ContentLength
	}
	return maxTaskBody
}
