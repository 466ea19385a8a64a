package apiserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestSeeApproval: the operator and approver keys see every approval; a key those of its
// sandboxes and those it asked; a caller without identity none.
func TestSeeApproval(t *testing.T) {
	a := approvals.Approval{Owner: "key-owner", AskedBy: "key:key-asker"}
	for _, c := range []struct {
		c    sandbox.Caller
		want bool
	}{
		{sandbox.Caller{Operator: true}, true},
		{sandbox.Caller{APIKey: "key-human", Approver: true}, true},
		{sandbox.Caller{APIKey: "key-owner"}, true},
		{sandbox.Caller{APIKey: "key-asker"}, true},
		{sandbox.Caller{APIKey: "key-other"}, false},
		{sandbox.Caller{APIKey: "key-admin", Admin: true}, true},
		{sandbox.Caller{Admin: true}, false},
		{sandbox.Caller{Approver: true}, false},
		{sandbox.Caller{}, false},
	} {
		if got := seeApproval(c.c, a); got != c.want {
			t.Errorf("%+v: %v, want %v", c.c, got, c.want)
		}
	}
	if seeApproval(sandbox.Caller{}, approvals.Approval{}) {
		t.Error("a caller without identity sees an operator's approval")
	}
}

func TestCheckAskAndWait(t *testing.T) {
	ok := v1.AskApprovalRequest{Sandbox: "sb-1", Tool: "t"}
	if d, err := checkAsk(ok); err != nil || d != defaultAskWait {
		t.Fatalf("%v %v", d, err)
	}
	ok.WaitSeconds = 86400
	if d, err := checkAsk(ok); err != nil || d != 24*time.Hour {
		t.Fatalf("%v %v", d, err)
	}
	for _, bad := range []v1.AskApprovalRequest{
		{Tool: "t"}, {Sandbox: "s"}, {Sandbox: "s", Tool: strings.Repeat("t", 201)},
		{Sandbox: "s", Tool: "t", Arguments: make([]byte, maxToolArgs+1)},
		{Sandbox: "s", Tool: "t", Summary: strings.Repeat("s", maxSummary+1)},
		{Sandbox: "s", Tool: "t", User: strings.Repeat("u", 65)},
		{Sandbox: "s", Tool: "t", WaitSeconds: -1}, {Sandbox: "s", Tool: "t", WaitSeconds: 86401},
	} {
		if _, err := checkAsk(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	for in, want := range map[string]time.Duration{"": 0, "30s": 30 * time.Second, "45": 45 * time.Second, "1h": maxLongPoll} {
		if got, err := parseWait(in); err != nil || got != want {
			t.Errorf("wait %q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "-1s", "1e3"} {
		if _, err := parseWait(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("wait %q: %v", bad, err)
		}
	}
}
