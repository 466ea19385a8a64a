// Package errdefs defines moat's error classes. Every layer wraps errors with context
// (fmt.Errorf("starting sandbox %s: %w", id, err)); the API edge maps a class to an HTTP
// status or Connect code exactly once, with errors.Is.
package errdefs

import "errors"

var (
	// ErrNotFound: the named thing (sandbox, template, runtime, user) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument: the request is malformed or a value is out of range.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrAlreadyExists: creating something that already exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrConflict: the request is valid but not in the current state (e.g. exec on a
	// stopped sandbox).
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: a needed facility (runtime, kernel feature) is missing on this host.
	ErrUnavailable = errors.New("unavailable")
	// ErrResourceExhausted: the host (or the operator's budget) has no room for this right
	// now, e.g. the data filesystem cannot hold another drive of the asked size. Freeing
	// resources (deleting sandboxes) or asking for less can make the same request succeed.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrUnauthenticated: missing or wrong credentials.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the caller is known but may not do this (e.g. bind a secret it
	// is not granted, or send a secret outside its scope).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrMethodNotAllowed: the route exists, but not for this method.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrNotImplemented: a route or option moat does not provide (yet).
	ErrNotImplemented = errors.New("not implemented")
)

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is of class ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsConflict reports whether err is of class ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsUnavailable reports whether err is of class ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
