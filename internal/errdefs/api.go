package errdefs

import (
	"errors"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// ToAPI turns err into the wire form of an error.
func ToAPI(err error) api.Error {
	e := api.Error{Code: Code(err), Message: Message(err)}
	var fe *FieldError
	if errors.As(err, &fe) {
		e.Field = fe.Field
	}
	return e
}

// RemoteError is an error that crossed the wire (HTTP or WebSocket). It
// keeps its class, so errors.Is(err, errdefs.ErrNotFound) works on the
// receiving side too.
type RemoteError struct{ Wire api.Error }

func (e *RemoteError) Error() string { return e.Wire.Message }

// Is matches the class named by the error's code.
func (e *RemoteError) Is(target error) bool {
	c := FromCode(e.Wire.Code)
	return c != nil && errors.Is(c, target)
}

// FromAPI turns a wire error back into an error value.
func FromAPI(e api.Error) error { return &RemoteError{Wire: e} }

// Message is err's text without the trailing class name that %w wrapping
// leaves ("node x is offline: conflict" → "node x is offline"): the code
// field already says it.
func Message(err error) string {
	msg := err.Error()
	for _, class := range []error{ErrNotFound, ErrConflict, ErrInvalid, ErrStorageFull, ErrUnavailable, ErrPermission, ErrUnauthenticated} {
		if errors.Is(err, class) {
			if m, ok := strings.CutSuffix(msg, ": "+class.Error()); ok {
				return m
			}
		}
	}
	return msg
}
