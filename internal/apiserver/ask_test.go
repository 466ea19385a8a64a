package apiserver

import (
	"errors"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

func TestWithAsk(t *testing.T) {
	if got, err := WithAsk(nil, false, 0); got != nil || err != nil {
		t.Fatalf("no ask: %v, %v", got, err)
	}
	got, err := WithAsk(nil, true, 0)
	if err != nil || !got.AskAll || got.Phase != "run" || got.Phases["run"].Net != "" {
		t.Fatalf("ask over the default: %+v, %v", got, err)
	}
	given := policy.Single(policy.Rules{Allow: []string{"a.test"}})
	got, err = WithAsk(&given, true, 45)
	if err != nil || !got.AskAll || got.AskWait != "45s" || got.Phases["run"].Allow[0] != "a.test" || given.AskAll {
		t.Fatalf("ask over a policy: %+v, %v (given %+v)", got, err, given)
	}
	withRule := policy.Single(policy.Rules{Ask: []string{"a.test"}})
	if got, err = WithAsk(&withRule, false, 30); err != nil || got.AskAll || got.AskWait != "30s" {
		t.Fatalf("wait for ask rules: %+v, %v", got, err)
	}
	for _, c := range []struct {
		ask  bool
		wait int64
	}{{false, 30}, {true, -1}, {true, 86401}} {
		if _, err := WithAsk(nil, c.ask, c.wait); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("WithAsk(nil, %v, %d) = %v, want invalid argument", c.ask, c.wait, err)
		}
	}
}
