package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	process "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/api/envd/process/processconnect"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// GET /v1/sandboxes/{id}/terminal is a login shell on a pseudo-terminal in the sandbox,
// over a WebSocket: binary messages carry terminal bytes both ways, a text message
// {"cols":N,"rows":N} resizes the terminal. ?cols=&rows= give the first size. The shell
// runs as the sandbox's default user through its moat-init (envd's process service, as
// `moat shell` does through the envd route) and ends when the WebSocket closes.
//
// A browser sends the console's session cookie on a WebSocket handshake from any site,
// and a handshake carries no CSRF header: the handshake's Origin, when present, must be
// the daemon's own (checked by the gate for a session, and here for everyone).

// termSize is the resize message.
type termSize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// parseTermSize reads a resize message, refusing sizes no terminal has. It is pure.
func parseTermSize(b []byte) (termSize, error) {
	var sz termSize
	if err := json.Unmarshal(b, &sz); err != nil {
		return termSize{}, fmt.Errorf("terminal resize message: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return sz, sz.check()
}

// check refuses sizes no terminal has.
func (sz termSize) check() error {
	if sz.Cols == 0 || sz.Rows == 0 || sz.Cols > 1000 || sz.Rows > 1000 {
		return fmt.Errorf("terminal size %dx%d: want 1 to 1000 each: %w", sz.Cols, sz.Rows, errdefs.ErrInvalidArgument)
	}
	return nil
}

// tokenHeaders adds a sandbox's access token (and asks moat-init to end the process with
// the stream) to every envd call of the terminal.
type tokenHeaders struct{ token string }

func (t tokenHeaders) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("X-Access-Token", t.token)
		return next(ctx, req)
	}
}

func (t tokenHeaders) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("X-Access-Token", t.token)
		conn.RequestHeader().Set("X-Moat-End-With-Client", "1") // moat-init's envd.EndWithClientHeader
		return conn
	}
}

func (t tokenHeaders) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (s *Server) terminal(w http.ResponseWriter, r *http.Request) {
	https := s.console != nil && s.console.https(r)
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host, https) {
		writeError(w, fmt.Errorf("a terminal WebSocket from origin %q (not this daemon's): %w", o, errdefs.ErrPermissionDenied))
		return
	}
	sz := termSize{Cols: 80, Rows: 24}
	if c, err := strconv.ParseUint(r.URL.Query().Get("cols"), 10, 32); err == nil {
		sz.Cols = uint32(c)
	}
	if rr, err := strconv.ParseUint(r.URL.Query().Get("rows"), 10, 32); err == nil {
		sz.Rows = uint32(rr)
	}
	if err := sz.check(); err != nil {
		writeError(w, err)
		return
	}
	sb, release, err := s.sandboxes.Acquire(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	if sb.State != sandbox.StateRunning {
		writeError(w, fmt.Errorf("sandbox %s is %s, no terminal: %w", sb.ID, sb.State, errdefs.ErrConflict))
		return
	}
	conn, err := websocket.Accept(w, r, nil) // nil options: coder/websocket also refuses a cross-origin handshake
	if err != nil {
		return // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The audit log records the terminal as an exec (a GET is otherwise not recorded), and
	// its end.
	what := "terminal /bin/bash -l (PTY)"
	if r.RemoteAddr != "" && r.RemoteAddr != "@" {
		what += " from " + r.RemoteAddr
	}
	s.auditTerminal(ctx, sb.ID, "exec", what)
	code, msg := s.runTerminal(ctx, cancel, conn, sb, sz)
	s.auditTerminal(context.WithoutCancel(ctx), sb.ID, "exec_end", what+" "+msg)
	_ = conn.Close(code, closeReason(msg))
}

// closeReason makes msg (which may hold a sandbox's words: the shell's exit status) a
// WebSocket close reason: printable ASCII only, at most 123 bytes (the protocol's limit).
// It is pure.
func closeReason(msg string) string {
	b := make([]byte, 0, len(msg))
	for i := 0; i < len(msg) && len(b) < 123; i++ {
		if c := msg[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		}
	}
	return string(b)
}

// auditTerminal records a terminal's start or end in the audit log, if there is one.
func (s *Server) auditTerminal(ctx context.Context, id, kind, detail string) {
	if s.auditLog != nil {
		s.auditLog.Record(ctx, id, kind, detail)
	}
}

// runTerminal bridges conn to a shell on a PTY in sb until either ends; it returns the
// WebSocket close status and reason.
func (s *Server) runTerminal(ctx context.Context, cancel func(), conn *websocket.Conn, sb *sandbox.Sandbox, sz termSize) (websocket.StatusCode, string) {
	pc := processconnect.NewProcessClient(&http.Client{Transport: s.sandboxes.EnvdTransport()}, "http://"+sb.ID,
		connect.WithInterceptors(tokenHeaders{token: sb.AccessToken}))
	start := &process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l"}, Envs: map[string]string{"TERM": "xterm-256color"}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: sz.Cols, Rows: sz.Rows}},
	}
	stream, err := pc.Start(ctx, connect.NewRequest(start))
	if err != nil {
		s.log.Warn("terminal: starting the shell", "sandbox", sb.ID, "err", err)
		return websocket.StatusInternalError, "could not start a shell in the sandbox"
	}
	defer stream.Close()
	s.log.Info("terminal opened", "sandbox", sb.ID, "api_key", sandbox.CallerFrom(ctx).APIKey)
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: ev.GetStart().GetPid()}}
			go func() {
				defer cancel() // the page went away: the shell ends with its stream
				s.terminalInput(ctx, conn, pc, sel)
			}()
		case ev.GetData().GetPty() != nil:
			if err := conn.Write(ctx, websocket.MessageBinary, ev.GetData().GetPty()); err != nil {
				return websocket.StatusGoingAway, ""
			}
		case ev.GetEnd() != nil:
			return websocket.StatusNormalClosure, "the shell ended: " + ev.GetEnd().GetStatus()
		}
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("terminal: the shell's stream broke", "sandbox", sb.ID, "err", err)
		return websocket.StatusInternalError, "the sandbox's shell stream broke"
	}
	return websocket.StatusNormalClosure, "the shell ended"
}

// terminalInput sends the WebSocket's binary messages to the PTY and applies its resize
// messages, until the WebSocket or ctx ends.
func (s *Server) terminalInput(ctx context.Context, conn *websocket.Conn, pc processconnect.ProcessClient, sel *process.ProcessSelector) {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageText {
			sz, err := parseTermSize(b)
			if err != nil {
				continue
			}
			_, _ = pc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel,
				Pty: &process.PTY{Size: &process.PTY_Size{Cols: sz.Cols, Rows: sz.Rows}}}))
			continue
		}
		if _, err := pc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel,
			Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: b}}})); err != nil {
			return
		}
	}
}
