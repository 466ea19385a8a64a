package intercept

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestApproveCredential: a request an Approve injection would be written into is asked
// about (method, path, secret name; never the value) and held until the answer: approved,
// the upstream sees the value; refused, or with no one to ask, the sandbox gets 403 and
// the upstream never sees the request. A request the injection would not be written into
// (no placeholder in it) is not asked about.
func TestApproveCredential(t *testing.T) {
	u := newUpstream(t, nil)
	var mu sync.Mutex
	var asked []CredentialQuestion
	answer := true
	inj := bearer()
	inj.Approve = true
	h := newHarness(t, u, Config{Injections: []Injection{inj}, Approve: func(_ context.Context, q CredentialQuestion) (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, q)
		return answer, "denied by test"
	}})
	res, body := do(t, h.client(), "POST", "https://api.test/v1/deploy?x=1", "Bearer "+placeholder, strings.NewReader("go"))
	if res.StatusCode != 200 {
		t.Fatalf("approved: status %d: %s", res.StatusCode, body)
	}
	if got := u.seen(); len(got) != 1 || got[0].Header.Get("Authorization") != "Bearer "+value {
		t.Fatalf("approved: upstream saw %+v", got)
	}
	want := CredentialQuestion{Host: host, Port: 443, Method: "POST", Path: "/v1/deploy", Secret: "openai"}
	if len(asked) != 1 || asked[0] != want {
		t.Fatalf("asked %+v, want %+v", asked, want)
	}

	mu.Lock()
	answer = false
	mu.Unlock()
	res, body = do(t, h.client(), "POST", "https://api.test/v1/denied", "Bearer "+placeholder, strings.NewReader("no"))
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "credential openai was not approved: denied by test") {
		t.Fatalf("denied: status %d: %s", res.StatusCode, body)
	}
	if got := u.seen(); len(got) != 1 {
		t.Fatalf("denied: the upstream saw the request: %+v", got)
	}

	// No placeholder: nothing would be injected, nothing is asked.
	n := len(asked)
	if res, body := do(t, h.client(), "GET", "https://api.test/public", "", nil); res.StatusCode != 200 || len(asked) != n {
		t.Fatalf("a request without the credential: status %d (%s), asked %d more", res.StatusCode, body, len(asked)-n)
	}

	// Nobody to ask: refused.
	u2 := newUpstream(t, nil)
	h2 := newHarness(t, u2, Config{Injections: []Injection{inj}})
	res, body = do(t, h2.client(), "GET", "https://api.test/v1/x", "Bearer "+placeholder, nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "needs a person's approval") || len(u2.seen()) != 0 {
		t.Fatalf("without an approver: status %d: %s; upstream %+v", res.StatusCode, body, u2.seen())
	}
}
