package sandbox

import (
	"context"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/moatdev/moat/internal/errdefs"
)

// Owners and visibility (issue 17 part 3). A sandbox records the API key that created it
// (Sandbox.Owner), that key's owner name then (Sandbox.OwnerName), and its visibility:
//
//   - VisibilityPrivate (the default): only its owner, admin keys and the operator may see
//     it or act on it; to every other key it does not exist;
//   - VisibilityTeam: every API key of the daemon may also see and use it (get, list,
//     events, egress log, stats, exec, terminal, files, ports and previews), but only its
//     owner, admin keys and the operator may manage it (Caller.MayManage).

// Sandbox visibilities (Sandbox.Visibility; the API's v1.Visibility*).
const (
	VisibilityPrivate = "private"
	VisibilityTeam    = "team"
)

// MaxOwnerName bounds an API key's owner name, in bytes.
const MaxOwnerName = 64

// CheckOwnerName returns an error of class errdefs.ErrInvalidArgument unless name is a
// valid owner name of an API key: "" (none), or at most MaxOwnerName bytes of valid UTF-8
// of printable characters (letters, digits, marks, punctuation, symbols and the ASCII
// space), neither starting nor ending with a space. Control, format (bidi overrides,
// zero-width) and other invisible characters are refused: the name is shown to people
// in `moat ls` and the console, and must read as what it is. It is pure.
func CheckOwnerName(name string) error {
	if name == "" {
		return nil
	}
	if len(name) > MaxOwnerName {
		return fmt.Errorf("owner name is longer than %d bytes: %w", MaxOwnerName, errdefs.ErrInvalidArgument)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("owner name %q is not valid UTF-8: %w", name, errdefs.ErrInvalidArgument)
	}
	if name[0] == ' ' || name[len(name)-1] == ' ' {
		return fmt.Errorf("owner name %q starts or ends with a space: %w", name, errdefs.ErrInvalidArgument)
	}
	for _, r := range name {
		if r != ' ' && !unicode.IsGraphic(r) || unicode.IsSpace(r) && r != ' ' || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("owner name %q has the character %U (only printable characters and spaces): %w", name, r, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckVisibility returns the visibility v names ("" is VisibilityPrivate), or an error
// of class errdefs.ErrInvalidArgument. It is pure.
func CheckVisibility(v string) (string, error) {
	switch v {
	case "", VisibilityPrivate:
		return VisibilityPrivate, nil
	case VisibilityTeam:
		return VisibilityTeam, nil
	}
	return "", fmt.Errorf("visibility %q: want %s or %s: %w", v, VisibilityPrivate, VisibilityTeam, errdefs.ErrInvalidArgument)
}

// Team reports whether sb is a team sandbox (every API key may use it).
func (sb *Sandbox) Team() bool { return sb.Visibility == VisibilityTeam }

// MayUse reports whether c may see sandbox sb and use it (read it, run commands in it, its
// files, ports and previews): the operator and admin keys every sandbox, an API key those
// it created, and every API key a team sandbox; a caller without identity none. A warm
// sandbox not yet handed over is nobody's but the operator's. It is pure.
func (c Caller) MayUse(sb *Sandbox) bool {
	if c.MayManage(sb) {
		return true
	}
	return c.APIKey != "" && sb.Team() && !sb.Warm
}

// MayManage reports whether c may change sandbox sb: its lifecycle (stop, start, pause,
// resume, delete), its policy, timeout, visibility, users and credentials, its snapshots
// and forks, and decisions about it. Only the operator, admin keys and its owner may. It
// is pure.
func (c Caller) MayManage(sb *Sandbox) bool {
	if c.Operator {
		return true
	}
	if c.APIKey == "" {
		return false
	}
	return c.Admin && !sb.Warm || sb.Owner == c.APIKey
}

// ownerName is the owner name a sandbox created by c records: its API key's, none for the
// operator.
func (c Caller) ownerName() string {
	if c.Operator {
		return ""
	}
	return c.Name
}

// setOwner makes sb the caller's of ctx, with the visibility opts asks (checked by
// validate; anything but team is private). Create, hand-over of a warm sandbox and
// create from a snapshot (restore into a new sandbox, fork) call it: a fork is its
// forker's and private, whatever its parent's visibility.
func setOwner(ctx context.Context, sb *Sandbox, opts CreateOptions) {
	c := CallerFrom(ctx)
	sb.Owner, sb.OwnerName = c.Owner(), c.ownerName()
	sb.Visibility = VisibilityPrivate
	if opts.Visibility == VisibilityTeam {
		sb.Visibility = VisibilityTeam
	}
}

// SetVisibility makes sandbox id's visibility v (CheckVisibility) and records it as an
// event (an audit record): "private -> team". The API edge checks the caller may manage
// the sandbox.
func (m *Manager) SetVisibility(ctx context.Context, id, v string) (*Sandbox, error) {
	v, err := CheckVisibility(v)
	if err != nil {
		return nil, err
	}
	unlock := m.lock(id)
	defer unlock()
	before := ""
	sb, err := m.store.Update(ctx, id, func(s *Sandbox) error {
		if s.Warm || s.State == StateDeleting {
			return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
		}
		before = s.Visibility
		if before == "" {
			before = VisibilityPrivate
		}
		s.Visibility = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	if before != v {
		m.event(ctx, id, "visibility", before+" -> "+v)
	}
	return sb, nil
}
