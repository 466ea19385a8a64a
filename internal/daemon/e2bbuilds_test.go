package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil"
)

// e2bStatus is what GET /templates/{t}/builds/{b}/status answers.
type e2bStatus struct {
	Status     string `json:"status"`
	LogEntries []struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"logEntries"`
	Reason *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

func (s e2bStatus) logs() string {
	var b strings.Builder
	for _, e := range s.LogEntries {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// TestE2BBuildsSurviveKill9: a `moat serve` killed with SIGKILL while an E2B template
// build runs: after the restart the SDK's status poll of that build answers error with
// "the daemon restarted during the build" and the step it was at (not building forever),
// and a build that finished before the kill is still served, ready, with its log.
func TestE2BBuildsSurviveKill9(t *testing.T) {
	p := newServeProcess(t)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p.sock)
		},
	}}
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://moat"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status := func(name, id string) e2bStatus {
		t.Helper()
		code, body := do("GET", "/templates/"+name+"/builds/"+id+"/status", "")
		var st e2bStatus
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("status of %s: %d %s", id, code, body)
		}
		return st
	}
	startBuild := func(name, cmd string) string {
		t.Helper()
		code, body := do("POST", "/v3/templates", `{"name":"`+name+`"}`)
		var req struct{ BuildID string }
		if code != http.StatusAccepted || json.Unmarshal([]byte(body), &req) != nil {
			t.Fatalf("request build of %s: %d %s", name, code, body)
		}
		steps, _ := json.Marshal(map[string]any{"fromTemplate": "host", "steps": []map[string]any{{"type": "RUN", "args": []string{cmd}}}})
		if code, body := do("POST", "/v2/templates/"+name+"/builds/"+req.BuildID, string(steps)); code != http.StatusAccepted {
			t.Fatalf("start build of %s: %d %s", name, code, body)
		}
		return req.BuildID
	}

	d1 := p.start(0)
	killed := false
	defer func() {
		if !killed {
			_ = d1.Process.Signal(syscall.SIGKILL)
			_ = d1.Wait()
		}
	}()
	quick := startBuild("quick", "echo quick-output")
	testutil.WaitFor(t, 90*time.Second, "the quick build", func() bool { return status("quick", quick).Status != "building" })
	if st := status("quick", quick); st.Status != "ready" || !strings.Contains(st.logs(), "quick-output") {
		t.Fatalf("quick build before the kill: %+v", st)
	}
	slow := startBuild("slow", "echo slow-started; sleep 600")
	testutil.WaitFor(t, 90*time.Second, "the slow build's step running", func() bool {
		return strings.Contains(status("slow", slow).logs(), "slow-started")
	})
	if st := status("slow", slow); st.Status != "building" {
		t.Fatalf("slow build before the kill: %+v", st)
	}

	_ = d1.Process.Signal(syscall.SIGKILL)
	_ = d1.Wait()
	killed = true

	d2 := p.start(0)
	defer func() {
		_ = d2.Process.Signal(syscall.SIGTERM)
		_ = d2.Wait()
	}()
	st := status("slow", slow)
	if st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, "the daemon restarted during the build") || st.Reason.Step != "1" {
		t.Errorf("slow build after the restart: %+v, want error at step 1 naming the restart", st)
	}
	if !strings.Contains(st.logs(), "step 1/2: RUN echo slow-started") {
		t.Errorf("slow build's log after the restart lost its steps: %s", st.logs())
	}
	if st := status("quick", quick); st.Status != "ready" || !strings.Contains(st.logs(), "quick-output") {
		t.Errorf("quick build after the restart: %+v", st)
	}
	if code, body := do("GET", "/templates/aliases/quick", ""); code != http.StatusOK {
		t.Errorf("template quick after the restart: %d %s", code, body)
	}
	if code, _ := do("GET", "/templates/aliases/slow", ""); code != http.StatusNotFound {
		t.Errorf("template slow after the restart: %d, want 404", code)
	}
}
