// Package badinput marks errors that are the user's input: a flag value, a
// file, a shape that does not fit. Libraries and suites wrap such errors with
// Errorf or Wrap and pass them up (callers add context with %w); the CLI maps
// them to exit 2 in one place, every other error of a run to exit 3.
package badinput

import (
	"errors"
	"fmt"
)

// Error is bad input; its message is the wrapped error's.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf formats a bad-input error; %w in format wraps as fmt.Errorf does.
func Errorf(format string, a ...any) error { return &Error{Err: fmt.Errorf(format, a...)} }

// Wrap marks err as bad input; nil stays nil.
func Wrap(err error) error {
	if err == nil || Is(err) {
		return err
	}
	return &Error{Err: err}
}

// Is reports whether err, or an error it wraps, is bad input.
func Is(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
