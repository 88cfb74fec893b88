// Package httpapi holds what every nodemgr HTTP API edge shares — the
// server's REST API and the agent's local API: error classes mapped to
// status codes (the one place), JSON answers, and strict decoding of request
// bodies that names the field at fault.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Status maps an error class to its HTTP status. This is the one place.
func Status(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errdefs.ErrMethodNotAllowed):
		return http.StatusMethodNotAllowed
	case errors.Is(err, errdefs.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, errdefs.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// WriteError answers with err's class as status and its wire form as body.
func WriteError(w http.ResponseWriter, err error) int {
	code := Status(err)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nodemgr"`)
	}
	WriteJSON(w, code, api.ErrorBody{Error: errdefs.ToAPI(err)})
	return code
}

// WriteJSON writes v as indented JSON with the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"error":{"code":"internal","message":"encode response"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// Decode reads a request body of at most max bytes into v strictly.
func Decode(r *http.Request, v any, max int64) error {
	body, err := ReadBody(r, max)
	if err != nil {
		return err
	}
	return DecodeStrict(body, v)
}

// ReadBody reads a request body of at most max bytes.
func ReadBody(r *http.Request, max int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > max {
		return nil, errdefs.TooLarge("body", "larger than %d bytes; send less at a time", max)
	}
	return body, nil
}

// DecodeStrict unmarshals JSON, rejecting unknown fields and naming the
// field of a type error.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errdefs.Field("body", "empty; a JSON object is required")
	}
	if fastDecodeStrict(body, v) == nil {
		return nil
	}
	// encoding/json says best what is wrong, and where.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			// encoding/json names the key but not where it sits.
			if path := unknownFieldPath(body, reflect.TypeOf(v)); path != "" {
				return errdefs.Field(path, "unknown field")
			}
		}
		return jsonFieldError(err)
	}
	if dec.More() {
		return errdefs.Field("body", "trailing data after the JSON object")
	}
	return nil
}

// fastDecodeStrict is the hot path of DecodeStrict (agents' task fetches
// and reports go through it): go-json-experiment's v1 API decodes with
// encoding/json's semantics and strictness two to three times faster. (It
// replaced goccy/go-json, twice as fast again but reading past the end of
// its input: it panicked on `{"\`, and in a WebSocket handler that is the
// whole server.) Its errors are not shown; on any error DecodeStrict
// decodes again with encoding/json to explain it.
//
// It unmarshals the whole body at once with encoding/json's (v1) options
// and unknown members rejected: the streaming decoder that v1's
// DisallowUnknownFields needs cost twice as much.
func fastDecodeStrict(body []byte, v any) error {
	return jsonv2.Unmarshal(body, v, jsonv1.DefaultOptionsV1(), jsonv2.RejectUnknownMembers(true))
}

// DecodeError turns an encoding/json decoding error into a FieldError that
// names the field and says what was wrong.
func DecodeError(err error) error { return jsonFieldError(err) }

func jsonFieldError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return errdefs.Field("body", "malformed JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return errdefs.Field(field, "must be %s, got %s", typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if name == "" {
			name = `""`
		}
		return errdefs.Field(name, "unknown field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.Field("body", "truncated JSON")
	}
	return errdefs.Field("body", "%v", err)
}

// unknownFieldPath walks a JSON document along the Go type it is decoded
// into and returns the dotted path of the first object key that type does
// not have ("worker_schedule.workers", "tasks[2].argvs"), or "".
func unknownFieldPath(body []byte, t reflect.Type) string {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	return findUnknown(doc, t, "")
}

func findUnknown(doc any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	join := func(key string) string {
		if key == "" {
			key = `""` // a field named nothing would read as no field at all
		}
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch d := doc.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, v := range d {
				if p := findUnknown(v, t.Elem(), join(k)); p != "" {
					return p
				}
			}
		case reflect.Struct:
			fields := jsonFields(t)
			for k, v := range d {
				ft, ok := fields[k]
				if !ok {
					return join(k)
				}
				if p := findUnknown(v, ft, join(k)); p != "" {
					return p
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, v := range d {
				if p := findUnknown(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

// jsonFields maps a struct's JSON keys to field types, embedded structs
// included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
