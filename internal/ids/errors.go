package ids

import (
	"errors"
	"fmt"
)

// Sentinel errors. Decoding errors are *DecodeError values wrapping one of
// ErrSyntax, ErrRange, ErrShard or ErrVersion.
var (
	// ErrSyntax: the text is not an id of the layout's type (not a canonical
	// decimal integer, not a canonical uuid, wrong length).
	ErrSyntax = errors.New("malformed id")
	// ErrRange: the value is well formed but outside what the layout can
	// produce (negative, time field beyond the layout's range, non-zero bits
	// above the layout's width).
	ErrRange = errors.New("id out of range")
	// ErrShard: the shard/worker field is not below the configured count.
	ErrShard = errors.New("shard field out of range")
	// ErrVersion: a uuid of a version (or variant) the layout does not produce.
	ErrVersion = errors.New("wrong uuid version")
	// ErrUnknownLayout: Lookup was given a name it does not know.
	ErrUnknownLayout = errors.New("unknown id layout")
	// ErrInvalidLayout: a layout's parameters are inconsistent (bit widths,
	// epoch, modulus, node count).
	ErrInvalidLayout = errors.New("invalid id layout")
	// ErrClockBackwards: the Generator's clock is behind the last issued id
	// by more than it may wait for.
	ErrClockBackwards = errors.New("clock moved backwards")
	// ErrClockStalled: the Generator's clock did not advance while it waited
	// for the next millisecond after the sequence ran out.
	ErrClockStalled = errors.New("clock not advancing")
)

// maxInputEcho bounds how much of a rejected input an error message repeats.
const maxInputEcho = 64

// DecodeError reports an id a layout refused. Err wraps one of the sentinel
// errors with detail.
type DecodeError struct {
	Layout string // layout name, as Lookup accepts it
	Input  string // the rejected text
	Err    error
}

// Error implements error. Long inputs are shortened in the message.
func (e *DecodeError) Error() string {
	in := e.Input
	if len(in) > maxInputEcho {
		in = in[:maxInputEcho] + "..."
	}
	return fmt.Sprintf("decode %s id %q: %v", e.Layout, in, e.Err)
}

// Unwrap returns the underlying error, for errors.Is and errors.As.
func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(layout, input string, err error) error {
	return &DecodeError{Layout: layout, Input: input, Err: err}
}
