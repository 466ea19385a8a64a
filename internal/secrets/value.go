// Package secrets is moat's secret store: named values kept encrypted at rest in the
// daemon's data directory, and Value, the type that carries a secret through the daemon
// without ever printing it.
package secrets

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
)

// redacted is what a Value shows in every printed, logged or marshalled form.
const redacted = "[redacted]"

// Value is a secret. It cannot print itself: fmt (every verb), encoding/json,
// encoding.TextMarshaler and log/slog all render it as "[redacted]". Reveal is the only way
// to read it. The zero Value is empty.
//
// The secret sits behind a pointer to a string: fmt prints a Value in an unexported field
// of another struct by reflection, without calling its methods, and shows such a pointer
// as an address under every verb (it follows pointers to structs, slices, arrays and maps
// only).
type Value struct {
	p *string
}

// NewValue returns a Value holding s.
func NewValue(s string) Value {
	return Value{p: &s}
}

func (v Value) str() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

// Reveal returns the secret itself. Call it only where the secret leaves the daemon for
// its destination (an outbound request, a sandbox's environment), never to log or answer
// a client.
func (v Value) Reveal() string { return v.str() }

// Equal reports whether the secret is s, in time independent of the contents and the
// lengths of both.
func (v Value) Equal(s string) bool {
	a, b := sha256.Sum256([]byte(v.str())), sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Empty reports whether the secret has no bytes.
func (v Value) Empty() bool { return v.str() == "" }

// String returns "[redacted]".
func (Value) String() string { return redacted }

// GoString returns "[redacted]" (%#v).
func (Value) GoString() string { return redacted }

// Format writes "[redacted]" for every verb and flag.
func (Value) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON returns the JSON string "[redacted]".
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]".
func (Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue makes slog record "[redacted]".
func (Value) LogValue() slog.Value { return slog.StringValue(redacted) }

var (
	_ fmt.Stringer   = Value{}
	_ fmt.GoStringer = Value{}
	_ fmt.Formatter  = Value{}
	_ slog.LogValuer = Value{}
)
