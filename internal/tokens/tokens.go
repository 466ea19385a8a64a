// Package tokens hands out the credentials that moat's egress proxy injects into requests
// to bound hosts: a fixed secret (Static), or a short-lived GitHub App installation token
// limited to one task's repositories and permissions (NewGitHubApp). A Provider caches its
// token, refreshes it shortly before it expires, and revokes it when the sandbox stops.
//
// Token values are a Secret, which cannot print itself; errors never carry a token, an
// App JWT or key material.
package tokens

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Provider hands out the current value of a credential for one sandbox. Implementations
// are safe for concurrent use.
type Provider interface {
	// Token returns the current credential: from the cache while it is fresh, otherwise
	// newly minted (concurrent callers share one mint). It fails if ctx ends first.
	Token(ctx context.Context) (Token, error)
	// Revoke invalidates the current credential where the issuer allows it, so that a
	// later Token obtains a new one. It is idempotent and runs to completion (bounded by
	// a timeout) even if ctx is cancelled, since it is called on sandbox stop and delete.
	Revoke(ctx context.Context) error
}

// Token is a credential value and the moment it stops being valid. A zero ExpiresAt means
// the value does not expire (Static).
type Token struct {
	Value     Secret    `json:"value"`
	ExpiresAt time.Time `json:"expires_at"`
}

// LogValue makes slog record the expiry and a redacted value.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("value", redacted), slog.Time("expires_at", t.ExpiresAt))
}

// redacted is what a Secret shows in every printed, logged or marshalled form.
const redacted = "[redacted]"

// Secret is a credential value. It cannot print itself: fmt (every verb), encoding/json,
// encoding.TextMarshaler and log/slog all render it as "[redacted]". Reveal is the only
// way to read it. The zero Secret is empty.
//
// The value sits behind a pointer to a string, so fmt printing a Secret held in an
// unexported field of another struct (by reflection, without calling its methods) shows
// an address, not the value.
type Secret struct {
	s *string
}

// NewSecret returns a Secret holding s.
func NewSecret(s string) Secret { return Secret{s: &s} }

// Reveal returns the value itself. Call it only where the value leaves the daemon for its
// destination (an outbound request header), never to log or answer a client.
func (s Secret) Reveal() string {
	if s.s == nil {
		return ""
	}
	return *s.s
}

// Empty reports whether the value has no bytes.
func (s Secret) Empty() bool { return s.Reveal() == "" }

// String returns "[redacted]".
func (Secret) String() string { return redacted }

// GoString returns "[redacted]" (%#v).
func (Secret) GoString() string { return redacted }

// Format writes "[redacted]" for every verb and flag.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON returns the JSON string "[redacted]".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue makes slog record "[redacted]".
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

var (
	_ fmt.Stringer   = Secret{}
	_ fmt.GoStringer = Secret{}
	_ fmt.Formatter  = Secret{}
	_ slog.LogValuer = Secret{}
	_ slog.LogValuer = Token{}
)

// Revealer is a secret that only reveals itself on request, such as secrets.Value.
type Revealer interface{ Reveal() string }

// Static returns a Provider for a fixed secret v, read (Reveal) on every Token call so a
// rotated store value is picked up. Its tokens never expire, and Revoke does nothing:
// moat cannot invalidate a secret it did not issue. Token fails with
// errdefs.ErrInvalidArgument if v is nil or empty.
func Static(v Revealer) Provider { return static{v} }

type static struct{ v Revealer }

func (p static) Token(context.Context) (Token, error) {
	if p.v == nil {
		return Token{}, fmt.Errorf("static credential: no secret: %w", errdefs.ErrInvalidArgument)
	}
	s := p.v.Reveal()
	if s == "" {
		return Token{}, fmt.Errorf("static credential: empty secret: %w", errdefs.ErrInvalidArgument)
	}
	return Token{Value: NewSecret(s)}, nil
}

func (static) Revoke(context.Context) error { return nil }
