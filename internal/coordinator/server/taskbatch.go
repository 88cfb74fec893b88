package server

import (
	"encoding/json"
	"errors"
	"net/http"

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

// decodeTaskBatch decodes {"tasks": [...]}, at most MaxTasksPerCall.
func decodeTaskBatch(dec *json.Decoder) ([]api.TaskSpec, error) {
	return httpapi.DecodeList(dec, "tasks", dispatch.MaxTasksPerCall, dispatch.ValidateTask)
}

// batchReservation is what a task batch reserves of the budget: its
// declared length, or the most a batch may be when it declares none.
func batchReservation(r *http.Request) int64 {
	if r.ContentLength > 0 && r.ContentLength <= maxTaskBody {
		return r.ContentLength
	}
	return maxTaskBody
}
