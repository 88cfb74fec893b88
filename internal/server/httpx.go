package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/auth"
	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/store"
)

// maxBody caps request bodies; nothing the API takes is near it, but for
// task batches, which get maxTaskBody.
const (
	maxBody     = 1 << 20
	maxTaskBody = 64 << 20
)

// statusOf maps an error class to its HTTP status. This is the one place.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict
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

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	if code == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nodemgr"`)
	}
	writeJSON(w, code, api.ErrorBody{Error: errdefs.ToAPI(err)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
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

// decodeJSON reads a JSON body into v strictly: unknown fields, wrong types,
// trailing data and oversized bodies are errors that name the field.
func decodeJSON(r *http.Request, v any) error { return decodeJSONMax(r, v, maxBody) }

func decodeJSONMax(r *http.Request, v any, max int64) error {
	body, err := readBody(r, max)
	if err != nil {
		return err
	}
	return DecodeStrict(body, v)
}

// readBody reads a request body of at most max bytes.
func readBody(r *http.Request, max int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > max {
		return nil, errdefs.Field("body", "larger than %d bytes; send less at a time", max)
	}
	return body, nil
}

// DecodeStrict unmarshals JSON, rejecting unknown fields and naming the
// field of a type error.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errdefs.Field("body", "empty; a JSON object is required")
	}
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
		return errdefs.Field(name, "unknown field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.Field("body", "truncated JSON")
	}
	return errdefs.Field("body", "%v", err)
}

// principalKey carries the authenticated principal in a request context.
type principalKey struct{}

func principalFrom(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// bearer extracts the token from "Authorization: Bearer X".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// authenticate checks the request's token, which must be of kind. It
// returns the stored token.
func (s *Server) authenticate(ctx context.Context, r *http.Request, kind string) (store.Token, error) {
	secret := bearer(r)
	if secret == "" {
		return store.Token{}, fmt.Errorf("missing token: pass --token or set NODEMGR_TOKEN (an admin's first token is in the server's data dir, file admin-token): %w", errdefs.ErrUnauthenticated)
	}
	if got := auth.KindOf(secret); got != kind {
		return store.Token{}, fmt.Errorf("wrong kind of token: this endpoint takes a %s token: %w", kindName(kind), errdefs.ErrUnauthenticated)
	}
	t, err := s.store.TokenByHash(ctx, auth.Hash(secret))
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Token{}, fmt.Errorf("invalid token: it was revoked or never existed; create a new one: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return store.Token{}, fmt.Errorf("authenticate: %w", err)
	}
	if !t.ExpiresAt.IsZero() && time.Now().After(t.ExpiresAt) {
		return store.Token{}, fmt.Errorf("token %s expired at %s; create a new one: %w", t.ID, t.ExpiresAt.Format(time.RFC3339), errdefs.ErrUnauthenticated)
	}
	s.hub.touchToken(t.ID)
	return t, nil
}

func kindName(kind string) string {
	switch kind {
	case api.TokenJoin:
		return "join"
	case api.TokenNode:
		return "node credential"
	}
	return "API"
}

// userPrincipal authenticates an API token and loads its user.
func (s *Server) userPrincipal(ctx context.Context, r *http.Request) (auth.Principal, error) {
	t, err := s.authenticate(ctx, r, api.TokenAPI)
	if err != nil {
		return auth.Principal{}, err
	}
	u, err := s.store.GetUser(ctx, t.User)
	if err != nil {
		return auth.Principal{}, fmt.Errorf("token's user %q is gone: %w", t.User, errdefs.ErrUnauthenticated)
	}
	return auth.Principal{User: u.Name, Admin: u.Admin, Groups: u.Groups}, nil
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
