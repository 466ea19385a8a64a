package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestSandboxOwnership: over the TCP listener, an API key uses only the sandboxes it
// created. Key A creates a sandbox binding a secret it is granted; key B (granted nothing)
// can neither run a command in it nor get its access token through the E2B API (get,
// connect), nor see it; the upstream never receives the value from B's attempts, while A's
// own request (the control) and the operator's carry it. A warm sandbox handed over to a key
// is that key's too.
func TestSandboxOwnership(t *testing.T) {
	const value = "owned-secret-5d21e9a0"
	in := newInternet(t)
	port, caFile := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("owner path=%s auth=%s", r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintln(w, "ok")
	}), "api.test")
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["api.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		c.EgressCA = caFile
		c.Listen = addr
		c.Warm = map[string]int{"runc": 1}
	})
	ctx := context.Background()
	apiHost := fmt.Sprintf("api.test:%d", port)
	if err := e.c.SetSecret(ctx, "OWNED", value, &v1.SecretScope{Hosts: []string{apiHost}}); err != nil {
		t.Fatal(err)
	}
	keyA, err := e.c.CreateAPIKey(ctx, "OWNED")
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := sdk.NewHTTP("http://"+addr, keyA.Key), sdk.NewHTTP("http://"+addr, keyB.Key)
	sb, err := a.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 512 << 20, DiskBytes: 256 << 20,
		Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"api.test"}}}},
		Credentials: []v1.Credential{{Secret: "OWNED", Hosts: []string{apiHost}}}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.d.Store.Get(ctx, sb.ID)
	if err != nil || rec.Owner != keyA.ID {
		t.Fatalf("the stored sandbox: owner %q (%v), want %s", rec.Owner, err, keyA.ID)
	}
	// exec runs the request that sends the placeholder, tagged, as client c.
	exec := func(c *sdk.Client, tag string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c",
			fmt.Sprintf(`curl -sSk --max-time 10 -H "Authorization: Bearer $OWNED" https://%s/%s`, apiHost, tag)}})
		return err
	}
	// raw sends an E2B or native request as key.
	raw := func(method, path, key string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{}`))
		req.Header.Set("X-API-KEY", key)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if err := exec(b, "from-b"); err == nil {
		t.Errorf("key B ran a command in key A's sandbox")
	}
	for _, path := range []string{"/sandboxes/" + sb.ID + "/connect", "/v2/sandboxes/" + sb.ID + "/connect", "/sandboxes/" + sb.ID + "/resume"} {
		if code, body := raw("POST", path, keyB.Key); code != 404 || strings.Contains(body, rec.AccessToken) {
			t.Errorf("key B: POST %s: %d %s, want 404 without the token", path, code, body)
		}
	}
	if code, body := raw("GET", "/sandboxes/"+sb.ID, keyB.Key); code != 404 || strings.Contains(body, rec.AccessToken) {
		t.Errorf("key B: GET /sandboxes/%s: %d %s", sb.ID, code, body)
	}
	if _, err := b.Get(ctx, sb.ID); !isNotFound(err) {
		t.Errorf("key B gets key A's sandbox: %v", err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("key B lists %+v (%v)", list, err)
	}
	// Without the token, the E2B gateway does not forward.
	start := `{"process":{"cmd":"/bin/bash","args":["-c","curl -sS -H \"Authorization: Bearer $OWNED\" https://` + apiHost + `/gateway-b"]}}`
	req, _ := http.NewRequest("POST", "http://"+addr+"/process.Process/Start", strings.NewReader(start))
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("X-API-KEY", keyB.Key)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("the gateway without the access token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, body := raw("DELETE", "/sandboxes/"+sb.ID, keyB.Key); code != 404 {
		t.Errorf("key B deletes key A's sandbox: %d %s", code, body)
	}

	// The control: A's own request and the operator's carry the value.
	if err := exec(a, "from-a"); err != nil {
		t.Errorf("key A runs a command in its sandbox: %v", err)
	}
	if err := exec(e.c, "from-operator"); err != nil {
		t.Errorf("the operator runs a command in key A's sandbox: %v", err)
	}
	if code, body := raw("POST", "/sandboxes/"+sb.ID+"/connect", keyA.Key); code != 200 || !strings.Contains(body, rec.AccessToken) {
		t.Errorf("key A connects: %d %s", code, body)
	}
	if !in.log.contains("owner path=/from-a auth=Bearer "+value) || !in.log.contains("owner path=/from-operator auth=Bearer "+value) {
		t.Errorf("the control requests did not carry the value: %v", in.log.all())
	}
	// At the receiver: nothing of B's attempts arrived, with the value or without.
	for _, line := range in.log.all() {
		if strings.Contains(line, "-b") {
			t.Errorf("key B's request reached the upstream: %s", line)
		}
	}

	// A warm sandbox claimed by key B is key B's: key A does not see it.
	testutil.WaitFor(t, 60*time.Second, "the warm pool to fill", func() bool { return len(e.warmIDs()) == 1 })
	warm := e.warmIDs()[0]
	own, err := b.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if own.ID != warm {
		t.Errorf("key B's create did not claim the warm sandbox %s: got %s", warm, own.ID)
	}
	if rec, err := e.d.Store.Get(ctx, own.ID); err != nil || rec.Owner != keyB.ID {
		t.Errorf("the handed-over sandbox is owned by %q (%v), want %s", rec.Owner, err, keyB.ID)
	}
	if _, err := a.Get(ctx, own.ID); !isNotFound(err) {
		t.Errorf("key A gets key B's sandbox: %v", err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 1 || list[0].ID != own.ID {
		t.Errorf("key B lists %+v (%v), want its own", list, err)
	}
}
