package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLIAskApprove: the round trip through the command line: a sandbox made with
// --ask holds a connection no rule allows as a pending approval (`moat approvals ls`);
// `moat approvals approve` lets it through to the server; `moat approvals deny` refuses
// the next one, which the server never sees.
func TestCLIAskApprove(t *testing.T) {
	c := newCLI(t)
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, "served\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	got := func(path string) bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(seen, path) }
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.2 ask.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.args = append(c.args, "--egress-hosts", hosts)
	c.serve()

	stdout, e, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--ask", "--ask-wait", "90s")
	id := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create --ask: %d %q %s", code, stdout, e)
	}
	// curl runs in the sandbox in the background; its exit code is the verdict.
	curl := func(path string) <-chan int {
		done := make(chan int, 1)
		go func() {
			_, _, code := c.run("", "exec", id, "--", "curl -sSf --max-time 80 http://ask.test:"+port+path)
			done <- code
		}()
		return done
	}
	pending := func() v1.Approval {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			stdout, e, code := c.run("", "approvals", "ls", "--state", "pending", "--sandbox", id, "--json")
			if code != 0 {
				t.Fatalf("approvals ls: %s", e)
			}
			var list []v1.Approval
			if err := json.Unmarshal([]byte(stdout), &list); err != nil {
				t.Fatalf("approvals ls --json: %v: %s", err, stdout)
			}
			if len(list) == 1 {
				return list[0]
			}
		}
		t.Fatal("no pending approval")
		return v1.Approval{}
	}
	wait := func(done <-chan int) int {
		select {
		case code := <-done:
			return code
		case <-time.After(2 * time.Minute):
			t.Fatal("curl did not finish")
			return -1
		}
	}

	done := curl("/approved")
	ap := pending()
	if ap.Kind != "network" || !strings.Contains(ap.Summary, "ask.test:"+port) {
		t.Fatalf("approval %+v", ap)
	}
	if got("/approved") {
		t.Fatal("the held connection reached the server before a decision")
	}
	if _, e, code := c.run("", "approvals", "approve", ap.ID, "--reason", "fine"); code != 0 {
		t.Fatalf("approvals approve: %s", e)
	}
	if code := wait(done); code != 0 || !got("/approved") {
		t.Fatalf("approved connection: curl exit %d, server saw it: %v", code, got("/approved"))
	}

	done = curl("/denied")
	ap = pending()
	if _, e, code := c.run("", "approvals", "deny", ap.ID, "--reason", "no"); code != 0 {
		t.Fatalf("approvals deny: %s", e)
	}
	if code := wait(done); code == 0 || got("/denied") {
		t.Fatalf("denied connection: curl exit %d, server saw it: %v", code, got("/denied"))
	}
	stdout, _, _ = c.run("", "approvals", "show", ap.ID, "--json")
	var shown v1.Approval
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil || shown.State != "denied" || shown.Reason != "no" {
		t.Fatalf("approvals show after deny: %s", stdout)
	}
}
