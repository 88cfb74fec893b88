package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// DecodeList decodes a body {"key": [...]} one element at a time, so a
// large list costs its decoded elements and a small read buffer, never
// the raw body besides. Each element is checked as it comes (field names
// it, as key[i]); more than max elements, an unknown key or trailing data
// is an error naming the field.
func DecodeList[T any](dec *json.Decoder, key string, max int, check func(field string, v T) error) ([]T, error) {
	if err := expectDelim(dec, '{', "body", "a JSON object"); err != nil {
		return nil, err
	}
	var list []T
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, decodeErrorAt(err, "body")
		}
		if k, _ := tok.(string); k != key {
			return nil, errdefs.Field(fmt.Sprint(tok), "unknown field")
		}
		if seen {
			return nil, errdefs.Field(key, "given twice")
		}
		seen = true
		if err := expectDelim(dec, '[', key, "an array"); err != nil {
			return nil, err
		}
		for dec.More() {
			field := fmt.Sprintf("%s[%d]", key, len(list))
			if len(list) == max {
				return nil, errdefs.Field(key, "at most %d per call; send several batches", max)
			}
			var v T
			if err := dec.Decode(&v); err != nil {
				return nil, decodeErrorAt(err, field)
			}
			if err := check(field, v); err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		if err := expectDelim(dec, ']', key, "the end of the array"); err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}', "body", "the end of the object"); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errdefs.Field("body", "trailing data after the JSON object")
	}
	if len(list) == 0 {
		return nil, errdefs.Field(key, "give at least one")
	}
	return list, nil
}

func expectDelim(dec *json.Decoder, want json.Delim, field, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return decodeErrorAt(err, field)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return errdefs.Field(field, "must be %s, got %v", what, tok)
	}
	return nil
}

// decodeErrorAt names the field of a decoding error, below field.
func decodeErrorAt(err error, field string) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) || errors.Is(err, io.ErrUnexpectedEOF) && field == "" {
		return err
	}
	var fe *errdefs.FieldError
	if errors.As(DecodeError(err), &fe) {
		if fe.Field == "body" {
			return errdefs.Field(field, "%s", fe.Reason)
		}
		return errdefs.Field(field+"."+fe.Field, "%s", fe.Reason)
	}
	return errdefs.Field(field, "%v", err)
}

// ByteBudget is a counting semaphore of bytes: what requests hold at once
// (bodies being received, say) may not be more than its size.
type ByteBudget struct {
	what  string // what it holds, for the error: "task batches"
	mu    sync.Mutex
	free  int64
	freed chan struct{} // closed and replaced whenever bytes come back
}

// NewByteBudget makes a budget of size bytes of what ("task batches").
func NewByteBudget(size int64, what string) *ByteBudget {
	return &ByteBudget{what: what, free: size, freed: make(chan struct{})}
}

// Acquire takes n bytes, waiting at most wait for them; it fails with
// ErrUnavailable (503) when they do not come back in time.
func (b *ByteBudget) Acquire(ctx context.Context, n int64, wait time.Duration) error {
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
			return fmt.Errorf("the server is receiving as many %s as it holds at once; retry in a few seconds: %w", b.what, errdefs.ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release gives back n bytes taken by Acquire.
func (b *ByteBudget) Release(n int64) {
	b.mu.Lock()
	b.free += n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
