package console_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// TestTerminalWebSocket drives GET /v1/sandboxes/{id}/terminal without a browser, with an
// API key: a shell answers on its PTY, a resize reaches it (stty size), and a handshake
// from another origin is refused (403) even with a valid key, as is another key (404).
func TestTerminalWebSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("real sandboxes (not with -short)")
	}
	d := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := sdk.NewHTTP(d.url, d.key).Create(ctx, v1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wsURL := "ws" + strings.TrimPrefix(d.url, "http") + "/v1/sandboxes/" + sb.ID + "/terminal?cols=100&rows=30"
	dial := func(key, origin string) (*websocket.Conn, *http.Response, error) {
		h := http.Header{"Authorization": {"Bearer " + key}}
		if origin != "" {
			h.Set("Origin", origin)
		}
		return websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
	}
	if _, resp, err := dial(d.key, "http://127.0.0.2:9"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin handshake: %v, %v; want 403", resp, err)
	}
	if _, resp, err := dial(d.key2, ""); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another key's handshake: %v, %v; want 404", resp, err)
	}
	conn, _, err := dial(d.key, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	var screen bytes.Buffer
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(screen.String(), want) {
			typ, b, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("reading the terminal (want %q): %v; so far %q", want, err, screen.String())
			}
			if typ != websocket.MessageBinary {
				t.Fatalf("a %v message from the terminal", typ)
			}
			screen.Write(b)
		}
	}
	send := func(s string) {
		if err := conn.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send("stty size; echo $((6*7))x\n")
	readUntil("30 100")
	readUntil("42x")
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"cols":132,"rows":43}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the resize is its own RPC; the next input may overtake it
	send("stty size\n")
	readUntil("43 132")
	send("exit\n")
	for {
		if _, _, err := conn.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("the terminal ended with %v, want a normal closure when the shell exits", err)
			}
			break
		}
	}
	// The audit log (the operator's) has the terminal's start and end, by the key.
	var recs []v1.AuditRecord
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if recs, err = sdk.NewUnix(d.sock).Audit(ctx, sb.ID, time.Time{}, 0, 0); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(recs, func(r v1.AuditRecord) bool { return r.Kind == "exec_end" && strings.Contains(r.Detail, "terminal") }) {
			break
		}
	}
	var kinds []string
	for _, r := range recs {
		if strings.Contains(r.Detail, "terminal") {
			kinds = append(kinds, r.Kind+" by "+r.Actor)
		}
	}
	if want := []string{"exec by key:", "exec_end by key:"}; len(kinds) != 2 || !strings.HasPrefix(kinds[0], want[0]) || !strings.HasPrefix(kinds[1], want[1]) {
		t.Fatalf("audit records of the terminal: %q, want an exec and its end by the key", kinds)
	}
}
