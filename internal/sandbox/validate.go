package sandbox

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// Validation of a create's options: defaults filled in, bad input refused before anything is made.

var (
	userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// DefaultRuntime is used when CreateOptions.Runtime is empty.
const DefaultRuntime = "runc"

// Runtimes lists the runtime names this manager can use, sorted.
func (m *Manager) Runtimes() []string {
	names := make([]string, 0, len(m.runtimes))
	for n := range m.runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// validate fills defaults and rejects bad options before anything is created.
func (m *Manager) validate(ctx context.Context, opts *CreateOptions) error {
	if opts.Runtime == "" {
		opts.Runtime = DefaultRuntime
	}
	if why, ok := m.cfg.Unusable[opts.Runtime]; ok {
		return fmt.Errorf("runtime %q cannot run sandboxes on this host: %s (available: %s): %w",
			opts.Runtime, why, strings.Join(m.Runtimes(), ", "), errdefs.ErrUnavailable)
	}
	if _, ok := m.runtimes[opts.Runtime]; !ok {
		return fmt.Errorf("runtime %q is not available on this host (available: %s; see `moat doctor`): %w",
			opts.Runtime, strings.Join(m.Runtimes(), ", "), errdefs.ErrNotFound)
	}
	if opts.Template == "" {
		opts.Template = "host"
	}
	if opts.User != "" && !userRE.MatchString(opts.User) {
		return fmt.Errorf("user %q is not a valid user name: %w", opts.User, errdefs.ErrInvalidArgument)
	}
	for k := range opts.Env {
		if !envRE.MatchString(k) {
			return fmt.Errorf("environment variable name %q is invalid: %w", k, errdefs.ErrInvalidArgument)
		}
	}
	if opts.Timeout < 0 {
		return fmt.Errorf("timeout %s is negative: %w", opts.Timeout, errdefs.ErrInvalidArgument)
	}
	switch opts.OnTimeout {
	case "", OnTimeoutStop, OnTimeoutDelete, OnTimeoutPause:
	default:
		return fmt.Errorf("on-timeout %q: want stop, delete or pause: %w", opts.OnTimeout, errdefs.ErrInvalidArgument)
	}
	if err := validateCredentials(opts.Credentials); err != nil {
		return err
	}
	if err := validateLifecycle(opts); err != nil {
		return err
	}
	if err := m.validateNaming(ctx, opts); err != nil {
		return err
	}
	if opts.AgentBranchPrefix != "" {
		p, err := NormalizeAgentPrefix(opts.AgentBranchPrefix)
		if err != nil {
			return err
		}
		opts.AgentBranchPrefix = p
	}
	switch opts.GitProtected {
	case "", GitProtectedRefuse:
		opts.GitProtected = ""
	case GitProtectedHold:
	default:
		return fmt.Errorf("git protected-path action %q: want refuse or hold: %w", opts.GitProtected, errdefs.ErrInvalidArgument)
	}
	switch opts.GitPush {
	case "", GitPushNone:
	default:
		return fmt.Errorf("git push %q: want none or empty (the agent branch): %w", opts.GitPush, errdefs.ErrInvalidArgument)
	}
	for _, c := range opts.Credentials {
		if _, clash := opts.Env[c.Secret]; clash && c.Header == "" {
			return fmt.Errorf("credential %s: the environment already sets %s: %w", c.Secret, c.Secret, errdefs.ErrInvalidArgument)
		}
	}
	if opts.Policy != nil {
		// Without a phase, the sandbox starts in "run" (policy.StartCreate).
		spec, err := opts.Policy.WithStartPhase(policy.StartCreate, "")
		if err == nil {
			err = spec.Validate()
		}
		if err != nil {
			return fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
		}
		opts.Policy = &spec
	}
	l, err := EffectiveLimits(opts.Limits, m.cfg.DefaultLimits, m.ceilings(CallerFrom(ctx)))
	if err != nil {
		return err
	}
	opts.Limits = l
	return nil
}

// ceilings are the bounds of the limits caller may ask for: the host's, the daemon's, and
// its API key's maxima (none for the operator).
// DefaultLimits are the limits of a sandbox that asks for none, before the ceilings.
func (m *Manager) DefaultLimits() Limits { return m.cfg.DefaultLimits }

func (m *Manager) ceilings(caller Caller) Ceilings {
	c := Ceilings{Host: m.cfg.Host, Daemon: m.cfg.MaxLimits, FileBudget: m.cfg.FileBudget, IODefaults: m.cfg.DefaultLimits}
	if !caller.Operator {
		c.Key, c.KeyID = caller.Max, caller.APIKey
	}
	return c
}
