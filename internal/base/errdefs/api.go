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

// Message is err's text as a person should read it: without the trailing
// class name that %w wrapping leaves ("node x is offline: conflict" → "node
// x is offline": the code field already says it), except that a missing
// thing still says so ("container c1: not found" → "container c1 not
// found"), and with a prefix that a caller repeated after its callee
// ("hibernate x: hibernate x: ..." → "hibernate x: ...") said once.
func Message(err error) string {
	msg := dedupePrefixes(err.Error())
	for _, class := range []error{ErrNotFound, ErrConflict, ErrInvalid, ErrStorageFull, ErrUnavailable, ErrPermission, ErrUnauthenticated} {
		if !errors.Is(err, class) {
			continue
		}
		if m, ok := strings.CutSuffix(msg, ": "+class.Error()); ok {
			if class == ErrNotFound {
				return m + " not found"
			}
			return m
		}
	}
	return msg
}

// dedupePrefixes drops a ": "-separated segment equal to the one before it.
func dedupePrefixes(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:1]
	for _, p := range parts[1:] {
		if p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}
