package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// FuzzDecodeStrict feeds DecodeStrict request bodies. It must never panic,
// must refuse with an invalid-input error that names a field, and its fast
// path must agree with encoding/json: the same bodies accepted, decoded to
// the same values.
func FuzzDecodeStrict(f *testing.F) {
	for _, seed := range []string{
		`{"reports":[{"task_id":"t-1","attempt":1,"outcome":"succeeded","result":{"exit_code":0,"stdout":"hi\n","duration_ms":3,"node_id":"n-1","finished_at":"2025-01-02T03:04:05Z"}}]}`,
		`{"suite_id":"s-1","max":32}`,
		`{"tasks":[{"argv":["sh","-c","echo h\u00e9"],"env":{"A":"1"},"timeout":"90s","priority":2}]}`,
		`{"name":"build","tags":["gpu"],"labels":{"team":"a"},"worker_schedule":{"worker_count":4,"cpu_binding":{"cores":2,"strategy":"RoundRobin"},"task_prefetch_count":32},"hooks":{"prepare":{"command":["make"],"timeout":"5m"}}}`,
		`{"state":"ready","suite_id":"s-1"}`,
		`{"max":1,"MAX":2,"Max":3}`, `{"max":1,"max":2}`, `{"max":1e2}`, `{"max":1.5}`, `{"max":-0}`,
		`{"suite_id":"` + "\xff" + `"}`, `{"suite_id":"\ud800"}`, `{"nope":1}`, `{"tasks":[{"argvs":[]}]}`,
		`{"max":1} {"max":2}`, `{"max":1}x`, `[]`, `null`, ` `, `{"\`, `{"reports":[{"\`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkStrict[api.TasksReport](t, body)
		checkStrict[api.TasksFetch](t, body)
		checkStrict[api.SubmitTasks](t, body)
		checkStrict[api.SuiteSpec](t, body)
		checkStrict[api.Heartbeat](t, body)
	})
}

func checkStrict[T any](t *testing.T, body []byte) {
	var got T
	err := DecodeStrict(body, &got)
	var fe *errdefs.FieldError
	if err != nil && (!errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &fe) || fe.Field == "") {
		t.Fatalf("DecodeStrict(%q, %T) = %v, want an invalid-input error naming a field", body, got, err)
	}
	var want T
	wantErr := stdDecodeStrict(body, &want)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("DecodeStrict(%q, %T) = %v, but encoding/json says %v", body, got, err, wantErr)
	}
	if err != nil {
		return
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("DecodeStrict(%q, %T) differs from encoding/json (-std +got):\n%s", body, got, diff)
	}
}

// stdDecodeStrict is DecodeStrict's contract in encoding/json alone.
func stdDecodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
