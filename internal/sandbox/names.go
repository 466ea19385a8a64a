package sandbox

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// Names, labels and references (issue 13 item 4).
//
// A sandbox may have a name, unique among the sandboxes of its owner (the operator, or one
// API key): two API keys may each have a sandbox "web", and neither learns of the other's
// (a create with a taken name fails with ErrAlreadyExists only for the owner who has it).
// The store enforces this with a unique index on (owner, name); the operator, who sees
// every owner's sandboxes, gets an ambiguity error naming the candidates when two owners'
// sandboxes share the name it gave.
//
// Anywhere a sandbox ID is taken, a reference may be given instead (Resolve): the full ID,
// a name, or a unique prefix of an ID (with or without its "sb-"). Resolution only ever
// looks at the sandboxes the caller may use, so a prefix never resolves to another owner's
// sandbox.

const (
	// MaxNameLen is the longest sandbox name.
	MaxNameLen = 63
	// MaxLabels is the most labels one sandbox may carry.
	MaxLabels = 64
	// idPrefix begins every sandbox ID (newID); names may not, so that a name never
	// reads as an ID or an ID prefix.
	idPrefix = "sb-"
)

var (
	nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	// A label name, and a label value when not empty: Kubernetes' qualified name part.
	labelNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	// A label key's prefix: a DNS subdomain (RFC 1123).
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	fullIDRE       = regexp.MustCompile(`^sb-[0-9a-f]{12}$`)
)

// CheckName reports whether name may name a sandbox: 1 to MaxNameLen characters of
// [a-zA-Z0-9_.-], starting with a letter or digit, and not starting with "sb-" (the shape of
// IDs). Bad input is errdefs.ErrInvalidArgument, with the reason. It is pure.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("sandbox name is empty: %w", errdefs.ErrInvalidArgument)
	case len(name) > MaxNameLen:
		return fmt.Errorf("sandbox name %.20q… is longer than %d characters: %w", name, MaxNameLen, errdefs.ErrInvalidArgument)
	case !nameRE.MatchString(name):
		return fmt.Errorf("sandbox name %q: want letters, digits, '_', '.' and '-', starting with a letter or digit: %w", name, errdefs.ErrInvalidArgument)
	case strings.HasPrefix(strings.ToLower(name), idPrefix):
		return fmt.Errorf("sandbox name %q: names may not start with %q (sandbox IDs do): %w", name, idPrefix, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckLabelKey checks a label key as Kubernetes does: an optional prefix (a DNS
// subdomain of at most 253 characters) and "/", then a name of 1 to 63 characters of
// [A-Za-z0-9-_.] beginning and ending with a letter or digit. It is pure.
func CheckLabelKey(key string) error {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	switch {
	case hasPrefix && (prefix == "" || len(prefix) > 253 || !dnsSubdomainRE.MatchString(prefix)):
		return fmt.Errorf("label key %q: the prefix before '/' must be a DNS subdomain (lower case, at most 253 characters): %w", key, errdefs.ErrInvalidArgument)
	case name == "" || len(name) > 63 || !labelNameRE.MatchString(name):
		return fmt.Errorf("label key %q: want 1 to 63 characters of letters, digits, '-', '_' and '.', beginning and ending with a letter or digit (optionally after PREFIX/): %w", key, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckLabelValue checks a label value as Kubernetes does: empty, or 1 to 63 characters of
// [A-Za-z0-9-_.] beginning and ending with a letter or digit. It is pure.
func CheckLabelValue(key, value string) error {
	if value != "" && (len(value) > 63 || !labelNameRE.MatchString(value)) {
		return fmt.Errorf("label %s: value %q: want at most 63 characters of letters, digits, '-', '_' and '.', beginning and ending with a letter or digit: %w", key, value, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckLabels checks every key and value of labels, and their number (MaxLabels).
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels: at most %d: %w", len(labels), MaxLabels, errdefs.ErrInvalidArgument)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := CheckLabelKey(k); err != nil {
			return err
		}
		if err := CheckLabelValue(k, labels[k]); err != nil {
			return err
		}
	}
	return nil
}

// ParseLabel parses "KEY=VALUE" (or "KEY", an empty value) and checks both parts.
func ParseLabel(s string) (key, value string, err error) {
	key, value, _ = strings.Cut(s, "=")
	if err := CheckLabelKey(key); err != nil {
		return "", "", err
	}
	if err := CheckLabelValue(key, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// checkNaming checks a create's name and labels. It is pure.
func checkNaming(opts *CreateOptions) error {
	if opts.Name != "" {
		if err := CheckName(opts.Name); err != nil {
			return err
		}
	}
	if len(opts.Labels) == 0 {
		opts.Labels = nil
	}
	return CheckLabels(opts.Labels)
}

// validateNaming checks a create's name and labels, and that the name is not taken among
// the caller's sandboxes (an early, friendly answer: the store's unique index on (owner,
// name) is what holds when two creates race).
func (m *Manager) validateNaming(ctx context.Context, opts *CreateOptions) error {
	if err := checkNaming(opts); err != nil {
		return err
	}
	if opts.Name == "" {
		return nil
	}
	list, err := m.store.List(ctx)
	if err != nil {
		return err
	}
	owner := CallerFrom(ctx).Owner()
	for _, sb := range list {
		if sb.Name == opts.Name && sb.Owner == owner && !sb.Warm {
			return fmt.Errorf("sandbox name %q is taken by %s (names are unique among your sandboxes): %w", opts.Name, sb.ID, errdefs.ErrAlreadyExists)
		}
	}
	return nil
}

// IsFullID reports whether ref has the shape of a sandbox ID (not whether one exists).
func IsFullID(ref string) bool { return fullIDRE.MatchString(ref) }

// Resolve returns the one sandbox of list (those the caller may use) that ref names: the
// sandbox with that ID; else the one with that name; else the one whose ID begins with ref
// (or with "sb-"+ref). No match is errdefs.ErrNotFound; a name two sandboxes carry (only the
// operator sees several owners' sandboxes) or a prefix of several IDs is
// errdefs.ErrInvalidArgument naming the candidates. It is pure.
func Resolve(list []*Sandbox, ref string) (*Sandbox, error) {
	if ref == "" {
		return nil, fmt.Errorf("no sandbox given: %w", errdefs.ErrInvalidArgument)
	}
	for _, sb := range list {
		if sb.ID == ref {
			return sb, nil
		}
	}
	var named, prefixed []*Sandbox
	for _, sb := range list {
		if sb.Name == ref {
			named = append(named, sb)
		}
		if strings.HasPrefix(sb.ID, ref) || strings.HasPrefix(sb.ID, idPrefix+ref) {
			prefixed = append(prefixed, sb)
		}
	}
	switch {
	case len(named) == 1:
		return named[0], nil
	case len(named) > 1:
		return nil, fmt.Errorf("%d sandboxes are named %q (%s): give an ID: %w", len(named), ref, candidates(named), errdefs.ErrInvalidArgument)
	case len(prefixed) == 1:
		return prefixed[0], nil
	case len(prefixed) > 1:
		return nil, fmt.Errorf("%q is the beginning of %d sandbox IDs (%s): give more of the ID: %w", ref, len(prefixed), candidates(prefixed), errdefs.ErrInvalidArgument)
	}
	return nil, fmt.Errorf("sandbox %q: no sandbox has this ID, name or ID prefix: %w", ref, errdefs.ErrNotFound)
}

// candidates lists up to 10 sandboxes' IDs (with their names), sorted.
func candidates(list []*Sandbox) string {
	var out []string
	for _, sb := range list {
		s := sb.ID
		if sb.Name != "" {
			s += " " + sb.Name
		}
		out = append(out, s)
	}
	slices.Sort(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return strings.Join(out, ", ")
}

// Filter selects sandboxes by name, state, template and labels; every condition must hold
// (AND). The zero Filter selects every sandbox.
type Filter struct {
	Names     []string
	States    []State
	Templates []string
	// Labels: key → value; a nil value only asks that the key be present.
	Labels []LabelCond
}

// LabelCond is one label condition of a Filter.
type LabelCond struct {
	Key   string
	Value *string // nil: any value
}

// ParseFilters parses filter expressions as `moat ls --filter` takes them: "name=NAME",
// "state=STATE", "template=TEMPLATE", "label=KEY" or "label=KEY=VALUE". Each is one more
// condition (AND). Bad input is errdefs.ErrInvalidArgument. It is pure.
func ParseFilters(exprs []string) (Filter, error) {
	var f Filter
	for _, e := range exprs {
		kind, arg, ok := strings.Cut(e, "=")
		if !ok || arg == "" {
			return Filter{}, fmt.Errorf("filter %q: want name=NAME, state=STATE, template=TEMPLATE, label=KEY or label=KEY=VALUE: %w", e, errdefs.ErrInvalidArgument)
		}
		switch kind {
		case "name":
			if err := CheckName(arg); err != nil {
				return Filter{}, fmt.Errorf("filter %q: %w", e, err)
			}
			f.Names = append(f.Names, arg)
		case "state":
			st := State(arg)
			if !st.Known() {
				return Filter{}, fmt.Errorf("filter %q: state %q: want creating, running, paused, stopped or deleting: %w", e, arg, errdefs.ErrInvalidArgument)
			}
			f.States = append(f.States, st)
		case "template":
			f.Templates = append(f.Templates, arg)
		case "label":
			k, v, hasValue := strings.Cut(arg, "=")
			if err := CheckLabelKey(k); err != nil {
				return Filter{}, fmt.Errorf("filter %q: %w", e, err)
			}
			c := LabelCond{Key: k}
			if hasValue {
				if err := CheckLabelValue(k, v); err != nil {
					return Filter{}, fmt.Errorf("filter %q: %w", e, err)
				}
				c.Value = &v
			}
			f.Labels = append(f.Labels, c)
		default:
			return Filter{}, fmt.Errorf("filter %q: unknown kind %q (name, state, template, label): %w", e, kind, errdefs.ErrInvalidArgument)
		}
	}
	return f, nil
}

// Match reports whether sb meets every condition of f. Each condition of one kind must
// hold too: two state= filters select nothing unless they are the same state. A template
// condition matches the template or the name the client used for it (an E2B alias).
func (f Filter) Match(sb *Sandbox) bool {
	for _, n := range f.Names {
		if sb.Name != n {
			return false
		}
	}
	for _, s := range f.States {
		if sb.State != s {
			return false
		}
	}
	for _, t := range f.Templates {
		if sb.Template != t && sb.TemplateAlias != t {
			return false
		}
	}
	for _, c := range f.Labels {
		v, ok := sb.Labels[c.Key]
		if !ok || (c.Value != nil && v != *c.Value) {
			return false
		}
	}
	return true
}

// Select returns the sandboxes of list that f matches, in order.
func (f Filter) Select(list []*Sandbox) []*Sandbox {
	out := make([]*Sandbox, 0, len(list))
	for _, sb := range list {
		if f.Match(sb) {
			out = append(out, sb)
		}
	}
	return out
}

// DeleteStopped deletes sandbox id if it is stopped, deciding under the sandbox's lock (a
// start that came first wins): a sandbox in any other state is errdefs.ErrConflict and
// stays. For prune (a sandbox listed stopped may have been started since).
func (m *Manager) DeleteStopped(ctx context.Context, id string) error {
	return m.deleteIf(ctx, id, func(s *Sandbox) error {
		if s.State != StateStopped || s.Warm {
			return fmt.Errorf("sandbox %s is %s, not stopped: %w", s.ID, s.State, errdefs.ErrConflict)
		}
		return nil
	})
}
