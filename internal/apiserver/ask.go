package apiserver

import (
	"fmt"
	"strconv"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// WithAsk applies a create request's ask and ask_wait_seconds to its policy (nil: the
// default, which under ask is a policy with no rules, so everything not denied is asked
// rather than refused). Pure; shared by the API and the CLI.
func WithAsk(p *policy.Spec, ask bool, waitSeconds int64) (*policy.Spec, error) {
	if !ask && waitSeconds == 0 {
		return p, nil
	}
	if waitSeconds < 0 || time.Duration(waitSeconds)*time.Second > policy.MaxAskWait {
		return nil, fmt.Errorf("ask_wait_seconds %d: must be between 1 and %d: %w", waitSeconds, int64(policy.MaxAskWait/time.Second), errdefs.ErrInvalidArgument)
	}
	var s policy.Spec
	if p != nil {
		s = *p
	} else {
		s = policy.Single(policy.Rules{})
	}
	if ask {
		s.AskAll = true
	}
	if waitSeconds > 0 {
		s.AskWait = strconv.FormatInt(waitSeconds, 10) + "s"
	}
	if !s.HasAsk() {
		return nil, fmt.Errorf("ask_wait_seconds without ask or ask rules: nothing would be held: %w", errdefs.ErrInvalidArgument)
	}
	return &s, nil
}
