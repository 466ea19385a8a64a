package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// hookReceiver is a webhook receiver on loopback: it verifies each delivery's signature
// (refusing a bad one with 401) and hands verified payloads to its handler.
type hookReceiver struct {
	secret []byte
	mu     sync.Mutex
	got    []approvals.Payload
	bad    int
	handle func(p approvals.Payload)
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := approvals.Verify(h.secret, r.Header.Get(approvals.HeaderTimestamp), r.Header.Get(approvals.HeaderSignature), body, time.Now(), approvals.DefaultTolerance); err != nil {
		h.mu.Lock()
		h.bad++
		h.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p approvals.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.got = append(h.got, p)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	if h.handle != nil {
		go h.handle(p) // a chat bot answers later, not inside the delivery
	}
}

func (h *hookReceiver) events(id string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, p := range h.got {
		if p.Approval.ID == id {
			out = append(out, p.Event+":"+p.Approval.State)
		}
	}
	return out
}

// TestApprovalToolCalls: an agent harness with its API key on TCP asks before tool calls;
// a webhook receiver on loopback verifies each delivery's signature and decides through
// the API with an approver key, while the agent long-polls:
//   - "deploy" is approved by the approver: the agent's long-poll returns approved, by
//     that key; the receiver saw created and decided, both signed;
//   - "rm" is denied: the agent sees denied with the reason;
//   - the agent's own key cannot approve its question (403), nor can a plain key of
//     another client (which does not even see it: 404); the approver can;
//   - a question nobody answers expires at its deadline;
//   - the events stream (SSE) ends with the decision; the sandbox's event log has them.
//
// Tool approvals touch no runtime: runc only.
func TestApprovalToolCalls(t *testing.T) {
	secret := []byte("webhook-secret-0123456789")
	rcv := &hookReceiver{secret: secret}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hookSrv := &http.Server{Handler: rcv}
	go hookSrv.Serve(ln)
	defer hookSrv.Close()
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		c.Listen = addr
		c.SweepInterval = 500 * time.Millisecond // the sweep expires the approvals of deleted sandboxes
		c.Approvals = daemon.ApprovalsConfig{WebhookURL: "http://" + ln.Addr().String() + "/hook", WebhookSecret: secret, WebhookBackoff: 20 * time.Millisecond}
	})
	ctx := context.Background()
	agentKey, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	humanKey, err := e.c.CreateAPIKeyWith(ctx, v1.APIKeyRequest{Approver: true})
	if err != nil || !humanKey.Approver {
		t.Fatalf("approver key: %v %+v", err, humanKey)
	}
	otherKey, _ := e.c.CreateAPIKey(ctx)
	keys, _ := e.c.APIKeys(ctx)
	for _, k := range keys {
		if k.Approver != (k.ID == humanKey.ID) {
			t.Errorf("key %s approver %v", k.ID, k.Approver)
		}
	}
	agent := sdk.NewHTTP("http://"+addr, agentKey.Key)
	human := sdk.NewHTTP("http://"+addr, humanKey.Key)
	other := sdk.NewHTTP("http://"+addr, otherKey.Key)
	sb, err := agent.Create(ctx, v1.CreateSandboxRequest{Runtime: "runc", MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rcv.handle = func(p approvals.Payload) {
		if p.Event != approvals.EventCreated || p.Approval.State != approvals.Pending {
			return
		}
		var act approvals.ToolAction
		_ = json.Unmarshal(p.Approval.Action, &act)
		switch act.Tool {
		case "deploy":
			if _, err := human.ApproveApproval(ctx, p.Approval.ID, v1.DecideApprovalRequest{Reason: "ship it"}); err != nil {
				t.Errorf("the approver approving: %v", err)
			}
		case "pytest":
			if _, err := human.ApproveApproval(ctx, p.Approval.ID, v1.DecideApprovalRequest{Scope: "sandbox"}); err != nil {
				t.Errorf("the approver approving for the sandbox: %v", err)
			}
		case "rm":
			if _, err := human.DenyApproval(ctx, p.Approval.ID, "not on main"); err != nil {
				t.Errorf("the approver denying: %v", err)
			}
		}
	}

	ask := func(tool string, wait int) *v1.Approval {
		t.Helper()
		a, err := agent.AskApproval(ctx, v1.AskApprovalRequest{Sandbox: sb.ID, User: "user", Tool: tool,
			Arguments: json.RawMessage(`{"target":"prod","force":true}`), Summary: tool + " to prod", WaitSeconds: wait})
		if err != nil {
			t.Fatalf("ask %s: %v", tool, err)
		}
		if a.State != "pending" || a.Kind != "tool" || a.AskedBy != "key:"+agentKey.ID || a.Sandbox != sb.ID {
			t.Fatalf("asked %+v", a)
		}
		return a
	}

	e.run("approved", func(t *testing.T, e *env) {
		a := ask("deploy", 60)
		got, err := agent.WaitApproval(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != "approved" || got.DecidedBy != "key:"+humanKey.ID || got.Reason != "ship it" || got.Scope != "once" {
			t.Fatalf("decided %+v", got)
		}
		var act approvals.ToolAction
		if err := json.Unmarshal(got.Action, &act); err != nil || act.Tool != "deploy" || string(act.Arguments) != `{"target":"prod","force":true}` {
			t.Fatalf("action %s", got.Action)
		}
		testutil.WaitFor(t, 10*time.Second, "the decided delivery", func() bool {
			return slices.Equal(rcv.events(a.ID), []string{"created:pending", "decided:approved"})
		})
	})
	e.run("approved for the sandbox", func(t *testing.T, e *env) {
		a := ask("pytest", 60)
		if got, err := agent.WaitApproval(ctx, a.ID); err != nil || got.State != "approved" || got.Scope != "sandbox" {
			t.Fatalf("decided %v %+v", err, got)
		}
		// The next call of the tool is approved at once, whatever its arguments.
		b, err := agent.AskApproval(ctx, v1.AskApprovalRequest{Sandbox: sb.ID, User: "user", Tool: "pytest", Arguments: json.RawMessage(`["-k","other"]`)})
		if err != nil || b.State != "approved" || !strings.Contains(b.Reason, a.ID) {
			t.Fatalf("the next call: %v %+v", err, b)
		}
	})
	e.run("denied", func(t *testing.T, e *env) {
		a := ask("rm", 60)
		got, err := agent.WaitApproval(ctx, a.ID)
		if err != nil || got.State != "denied" || got.Reason != "not on main" {
			t.Fatalf("denied: %v %+v", err, got)
		}
	})
	e.run("the agent cannot approve itself", func(t *testing.T, e *env) {
		a := ask("curl", 60)
		_, err := agent.ApproveApproval(ctx, a.ID, v1.DecideApprovalRequest{})
		assertPermissionDenied(t, err, "--approver")
		if _, err := other.ApproveApproval(ctx, a.ID, v1.DecideApprovalRequest{}); !isNotFound(err) {
			t.Fatalf("another client's key: %v, want not found", err)
		}
		if list, err := other.Approvals(ctx, "", "", ""); err != nil || len(list) != 0 {
			t.Fatalf("another client lists %v %+v", err, list)
		}
		if list, err := agent.Approvals(ctx, "pending", sb.ID, "tool"); err != nil || len(list) != 1 || list[0].ID != a.ID {
			t.Fatalf("the agent lists %v %+v", err, list)
		}
		if g, _ := agent.Approval(ctx, a.ID, 0); g.State != "pending" {
			t.Fatalf("after refused decisions: %+v", g)
		}
		// The events stream: the approval now, then its decision, then the end.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/approvals/"+a.ID+"/events", nil)
		req.Header.Set("X-API-KEY", agentKey.Key) // as an E2B SDK sends its key
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("events: %v %v", err, res)
		}
		defer res.Body.Close()
		if _, err := human.ApproveApproval(ctx, a.ID, v1.DecideApprovalRequest{}); err != nil {
			t.Fatalf("the approver: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		if n := strings.Count(string(body), "event: approval\n"); n != 2 || !strings.Contains(string(body), `"state":"approved"`) {
			t.Fatalf("events stream:\n%s", body)
		}
	})
	e.run("deadline", func(t *testing.T, e *env) {
		a := ask("slow", 1)
		got, err := agent.WaitApproval(ctx, a.ID)
		if err != nil || got.State != "expired" {
			t.Fatalf("after the deadline: %v %+v", err, got)
		}
		if _, err := human.ApproveApproval(ctx, a.ID, v1.DecideApprovalRequest{}); !errors.Is(err, sdk.ErrConflict) {
			t.Fatalf("approving an expired approval: %v", err)
		}
		testutil.WaitFor(t, 10*time.Second, "the expired delivery", func() bool {
			return slices.Equal(rcv.events(a.ID), []string{"created:pending", "expired:expired"})
		})
	})
	e.run("sandbox deleted", func(t *testing.T, e *env) {
		sb2, err := agent.Create(ctx, v1.CreateSandboxRequest{Runtime: "runc", MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.AskApproval(ctx, v1.AskApprovalRequest{Sandbox: sb2.ID, Tool: "orphan", WaitSeconds: 3600})
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.Delete(ctx, sb2.ID); err != nil {
			t.Fatal(err)
		}
		got, err := agent.WaitApproval(ctx, a.ID)
		if err != nil || got.State != "expired" || got.Reason != "its sandbox was deleted" {
			t.Fatalf("the approval of a deleted sandbox: %v %+v", err, got)
		}
	})
	e.run("bad input", func(t *testing.T, e *env) {
		for _, req := range []v1.AskApprovalRequest{
			{Sandbox: sb.ID},
			{Tool: "x"},
			{Sandbox: sb.ID, Tool: "x", WaitSeconds: -1},
			{Sandbox: sb.ID, Tool: "x", WaitSeconds: 86401},
			{Sandbox: sb.ID, Tool: strings.Repeat("x", 201)},
		} {
			if _, err := agent.AskApproval(ctx, req); !errors.Is(err, sdk.ErrInvalidArgument) {
				t.Errorf("ask %+v: %v", req, err)
			}
		}
		if _, err := other.AskApproval(ctx, v1.AskApprovalRequest{Sandbox: sb.ID, Tool: "x"}); !isNotFound(err) {
			t.Errorf("asking about another client's sandbox: %v", err)
		}
		if _, err := agent.Approval(ctx, "ap-nope", 0); !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("bad id: %v", err)
		}
	})
	rcv.mu.Lock()
	if rcv.bad != 0 {
		t.Errorf("%d deliveries failed verification", rcv.bad)
	}
	rcv.mu.Unlock()
	evs, err := e.c.Events(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Kind == "approval" {
			n++
		}
	}
	if n < 8 {
		t.Errorf("%d approval events in the sandbox's log: %+v", n, evs)
	}
}

// TestApprovalsSurviveKill9: a `moat serve` killed with SIGKILL while tool approvals are
// pending keeps them: after a restart they are listed, still pending, with their deadline,
// and can be decided; a `moat approvals ask` that was waiting through the kill and the
// restart gets the decision made after it (exit 0). The CLI's ask exit codes (0 approved,
// 3 denied, 4 expired) and its refusals of bad input.
func TestApprovalsSurviveKill9(t *testing.T) {
	p := newServeProcess(t)
	bin, sock := filepath.Dir(p.bin), p.sock
	start := func() *exec.Cmd { return p.start(0) }
	moat := func(args ...string) (string, int) {
		cmd := exec.Command(filepath.Join(bin, "moat"), append([]string{"--socket", sock}, args...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	c := sdk.NewUnix(sock)
	ctx := context.Background()
	d1 := start()
	sb, err := c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.AskApproval(ctx, v1.AskApprovalRequest{Sandbox: sb.ID, Tool: "migrate", Arguments: json.RawMessage(`["--all"]`), WaitSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	// A shell harness waiting in `moat approvals ask` across the kill and the restart.
	waiting := exec.Command(filepath.Join(bin, "moat"), "--socket", sock, "approvals", "ask", sb.ID, "--tool", "across-restart", "--wait", "1h")
	waitingErr, _ := waiting.StderrPipe()
	if err := waiting.Start(); err != nil {
		t.Fatal(err)
	}
	defer waiting.Process.Kill()
	line := make([]byte, 200)
	n, _ := waitingErr.Read(line)
	waitingID := strings.TrimSuffix(strings.Fields(string(line[:n]))[1], ":")
	go io.Copy(io.Discard, waitingErr)

	_ = d1.Process.Signal(syscall.SIGKILL)
	_ = d1.Wait()

	d2 := start()
	defer func() {
		_ = c.Delete(ctx, sb.ID)
		_ = d2.Process.Signal(syscall.SIGTERM)
		_ = d2.Wait()
	}()
	got, err := c.Approval(ctx, a.ID, 0)
	if err != nil || got.State != "pending" || got.Deadline != a.Deadline {
		t.Fatalf("after kill -9 and restart: %v %+v", err, got)
	}
	out, code := moat("approvals", "ls", "--state", "pending", "--json")
	var list []v1.Approval
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != waitingID {
		t.Fatalf("moat approvals ls: %d %s", code, out)
	}
	if out, code := moat("approvals", "show", a.ID); code != 0 || !strings.Contains(out, `"tool": "migrate"`) || !strings.Contains(out, "pending") {
		t.Fatalf("moat approvals show: %d %s", code, out)
	}
	if out, code := moat("approvals", "approve", a.ID, "--reason", "after restart"); code != 0 || !strings.Contains(out, a.ID+" approved") {
		t.Fatalf("moat approvals approve: %d %s", code, out)
	}
	if got, _ := c.Approval(ctx, a.ID, 0); got.State != "approved" || got.DecidedBy != "operator" || got.Reason != "after restart" {
		t.Fatalf("decided after restart: %+v", got)
	}
	if out, code := moat("approvals", "approve", waitingID); code != 0 {
		t.Fatalf("moat approvals approve %s: %d %s", waitingID, code, out)
	}
	if err := waiting.Wait(); err != nil {
		t.Fatalf("moat approvals ask waiting across the restart: %v", err)
	}
	// moat approvals ask: exit 0 approved, 3 denied, 4 expired.
	for _, c := range []struct {
		decide string
		code   int
	}{{"approve", 0}, {"deny", 3}, {"", 4}} {
		cmd := exec.Command(filepath.Join(bin, "moat"), "--socket", sock, "approvals", "ask", sb.ID, "--tool", "t-"+c.decide, "--args", `{"a":1}`, "--wait", "2s")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 200)
		n, _ := stderr.Read(buf)
		id := strings.Fields(string(buf[:n]))[1]
		id = strings.TrimSuffix(id, ":")
		if c.decide != "" {
			if out, code := moat("approvals", c.decide, id); code != 0 {
				t.Fatalf("moat approvals %s %s: %d %s", c.decide, id, code, out)
			}
		}
		go io.Copy(io.Discard, stderr)
		err := cmd.Wait()
		got := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			got = ee.ExitCode()
		}
		if got != c.code {
			t.Errorf("moat approvals ask, %q: exit %d, want %d", c.decide, got, c.code)
		}
	}
	if out, code := moat("approvals", "approve", "ap-000000000000"); code == 0 || !strings.Contains(out, "not found") {
		t.Errorf("approving an unknown approval: %d %s", code, out)
	}
	if out, code := moat("approvals", "approve", a.ID, "--scope", "forever"); code == 0 || !strings.Contains(out, "--scope") {
		t.Errorf("bad scope: %d %s", code, out)
	}
}

// TestApprovalHeldPush: a push the git gate holds becomes a push approval naming the
// change, its remote and ref, and the protected path; approving the approval applies the
// push (the server's branch moves to the pushed commit, the change record says approved
// by the operator); a second held push denied through `moat change deny` (the change API)
// closes its approval as denied. Against the real git http-backend on loopback TLS; the
// approval path is the same whatever the runtime: runc only.
func TestApprovalHeldPush(t *testing.T) {
	const secret = "real-git-secret-approvals-1"
	g := newGitGate(t, secret, nil, nil)
	e, bare := g.e, g.bare
	ctx := context.Background()
	sb := g.sandbox(t, e, v1.CreateSandboxRequest{Runtime: "runc", GitProtected: "hold"}, "runc")
	prefix := "refs/heads/agent/" + sb.ID + "/"
	head := func() string { return strings.TrimSpace(e.mustSh(sb.ID, `git -C /tmp/repo rev-parse HEAD`)) }
	if r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:`+prefix+`work`); r.code != 0 {
		t.Fatalf("push to the agent branch: %+v", r)
	}
	hold := func(msg string) (string, string, v1.Approval) {
		t.Helper()
		e.mustSh(sb.ID, `cd /tmp/repo && mkdir -p .github/workflows && echo 'on: push # `+msg+`' >> .github/workflows/ci.yml && git add . && git commit -qm `+msg)
		tip := head()
		r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:`+prefix+`work`)
		m := heldRE.FindStringSubmatch(r.stderr)
		if r.code == 0 || m == nil {
			t.Fatalf("held push: %+v", r)
		}
		list, err := e.c.Approvals(ctx, "pending", sb.ID, "push")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			var pa approvals.PushAction
			if json.Unmarshal(a.Action, &pa) == nil && pa.Change == m[1] {
				if pa.Remote == "" || !slices.Equal(pa.Refs, []string{prefix + "work"}) || a.AskedBy != "git-gate" ||
					!strings.Contains(a.Summary, ".github/workflows/ci.yml") {
					t.Fatalf("push approval %+v action %+v", a, pa)
				}
				return m[1], tip, a
			}
		}
		t.Fatalf("no pending push approval for %s: %+v", m[1], list)
		return "", "", v1.Approval{}
	}

	cid, tip, a := hold("one")
	before := g.pushes()
	got, err := e.c.ApproveApproval(ctx, a.ID, v1.DecideApprovalRequest{Reason: "reviewed"})
	if err != nil || got.State != "approved" || got.DecidedBy != "operator" {
		t.Fatalf("approving the push approval: %v %+v", err, got)
	}
	if refs := serverRefs(t, bare); refs[prefix+"work"] != tip {
		t.Fatalf("after approval the server's branch is %s, want %s", refs[prefix+"work"], tip)
	}
	if g.pushes() != before+1 {
		t.Errorf("the server saw %d pushes on approval, want 1", g.pushes()-before)
	}
	ch, err := e.c.Change(ctx, sb.ID, cid)
	if err != nil || ch.Decision != "approved" || ch.Decided == nil || ch.Decided.By != "operator" || ch.Decided.Reason != "reviewed" {
		t.Fatalf("the change after the approval: %v %+v", err, ch)
	}

	cid2, _, a2 := hold("two")
	refs := serverRefs(t, bare)
	if _, err := e.c.DenyChange(ctx, sb.ID, cid2, "no workflows"); err != nil {
		t.Fatal(err)
	}
	got, err = e.c.Approval(ctx, a2.ID, 0)
	if err != nil || got.State != "denied" || got.Reason != "no workflows" || got.DecidedBy != "operator" {
		t.Fatalf("the approval after moat change deny: %v %+v", err, got)
	}
	if _, err := e.c.ApproveApproval(ctx, a2.ID, v1.DecideApprovalRequest{}); !errors.Is(err, sdk.ErrConflict) {
		t.Fatalf("approving a closed push approval: %v", err)
	}
	if now := serverRefs(t, bare); now[prefix+"work"] != refs[prefix+"work"] {
		t.Fatal("a denied push reached the server")
	}
}
