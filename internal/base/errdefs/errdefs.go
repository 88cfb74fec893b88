// Package errdefs defines the few classes of error that nodemgr distinguishes
// (not found, conflict, invalid, unavailable, permission, unauthenticated).
//
// Packages wrap one of these sentinels with the operation that failed; the API
// edge maps the class to an HTTP status in exactly one place (see server).
package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"syscall"
)

// The error classes. Check them with errors.Is.
var (
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrInvalid         = errors.New("invalid")
	ErrUnavailable     = errors.New("unavailable")
	ErrPermission      = errors.New("permission denied")
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrTooLarge is input over a size limit; it is an ErrInvalid too.
	ErrTooLarge = errors.New("too large")
	// ErrMethodNotAllowed is a request whose path exists but not with its method.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrStorageFull is a write refused for want of disk space (SQLite's
	// SQLITE_FULL, ENOSPC). It is an ErrUnavailable too: nothing is wrong
	// with the request, and it works once space is freed.
	ErrStorageFull error = storageFull{}
)

type storageFull struct{}

func (storageFull) Error() string        { return "storage full" }
func (storageFull) Is(target error) bool { return target == ErrUnavailable }

// FieldError says which input field is wrong and why. It is an ErrInvalid.
type FieldError struct {
	Field  string // dotted path, e.g. "labels.zone" or "heartbeat_interval"
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Field returns an ErrInvalid that names field and the reason.
func Field(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// TooLarge returns a FieldError that is also an ErrTooLarge.
func TooLarge(field, format string, args ...any) error {
	return &tooLarge{FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}}
}

type tooLarge struct{ FieldError }

func (e *tooLarge) Is(target error) bool { return target == ErrTooLarge || target == ErrInvalid }
func (e *tooLarge) As(target any) bool {
	if fe, ok := target.(**FieldError); ok {
		*fe = &e.FieldError
		return true
	}
	return false
}

// NotFound returns an ErrNotFound saying what was not found. format names
// the thing ("node %q"), optionally followed by a hint after " (" or "; ";
// the message says "not found" after the name: `node "x" not found (see
// nodemgr node ls)`. A format that already says so in words of its own
// ("no service %s on this node", "artifact %s is not installed") is kept
// as written. The class travels beside the text, not as a ": not found"
// suffix, so nothing has to strip it before a person reads it.
func NotFound(format string, args ...any) error {
	return Class(errors.New(notFoundText(format, args)), ErrNotFound)
}

// Conflict returns an ErrConflict with a message. The message is the whole
// text: the class travels beside it, not as a ": conflict" suffix.
func Conflict(format string, args ...any) error {
	return Class(fmt.Errorf(format, args...), ErrConflict)
}

// saysAbsent matches a format that already tells of the absence.
var saysAbsent = regexp.MustCompile(`(?i)\b(not|no|unknown|gone)\b`)

// notFoundText puts "not found" after the name in format (before its
// hint), unless format already says it. The check reads the format, not
// the arguments, so a node named "no-gpu" changes nothing.
func notFoundText(format string, args []any) string {
	if saysAbsent.MatchString(format) {
		return fmt.Sprintf(format, args...)
	}
	cut := len(format)
	for _, sep := range []string{" (", "; "} {
		if i := strings.Index(format, sep); i >= 0 && i < cut {
			cut = i
		}
	}
	n := min(countVerbs(format[:cut]), len(args))
	return fmt.Sprintf(format[:cut], args[:n]...) + " not found" + fmt.Sprintf(format[cut:], args[n:]...)
}

// countVerbs counts the arguments a format string consumes (%% takes none).
func countVerbs(format string) int {
	n := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		if i+1 < len(format) && format[i+1] == '%' {
			i++
			continue
		}
		n++
	}
	return n
}

// Code returns the stable, machine-readable code of err's class, as used in
// API error bodies.
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrMethodNotAllowed):
		return "method_not_allowed"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrStorageFull):
		return "storage_full"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrPermission):
		return "permission_denied"
	case errors.Is(err, ErrUnauthenticated):
		return "unauthenticated"
	default:
		return "internal"
	}
}

// FromCode turns an API error code back into its class, so clients can use
// errors.Is on errors that crossed the wire.
func FromCode(code string) error {
	switch code {
	case "not_found":
		return ErrNotFound
	case "conflict":
		return ErrConflict
	case "invalid":
		return ErrInvalid
	case "too_large":
		return ErrTooLarge
	case "method_not_allowed":
		return ErrMethodNotAllowed
	case "storage_full":
		return ErrStorageFull
	case "unavailable":
		return ErrUnavailable
	case "permission_denied":
		return ErrPermission
	case "unauthenticated":
		return ErrUnauthenticated
	}
	return nil
}

// IsNotFound is errors.Is(err, ErrNotFound), for brevity at call sites.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// Class returns err, with its message, as also belonging to the class
// class (one of the Err* above).
func Class(err, class error) error { return &classed{err: err, class: class} }

type classed struct {
	err   error
	class error
}

func (e *classed) Error() string   { return e.err.Error() }
func (e *classed) Unwrap() []error { return []error{e.err, e.class} }

// FromOS gives an error of the operating system its class: a missing file
// is not found, a denied one permission, an existing one or a file where a
// directory should be a conflict, a full disk storage full. Others come
// back as they are.
func FromOS(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return Class(err, ErrStorageFull)
	case errors.Is(err, fs.ErrNotExist):
		return Class(err, ErrNotFound)
	case errors.Is(err, fs.ErrPermission):
		return Class(err, ErrPermission)
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return Class(err, ErrConflict)
	}
	return err
}
