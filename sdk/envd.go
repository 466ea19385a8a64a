package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/moatdev/moat/api/envd/filesystem/filesystemconnect"
	process "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/api/envd/process/processconnect"
)

// userHeader carries the user an envd call runs as; the daemon turns it into envd's
// user selection. (Must match internal/apiserver.UserHeader.)
const userHeader = "X-Moat-User"

// endWithClientHeader asks moat-init to end a started process when its stream's client
// goes away (moat-init's envd.EndWithClientHeader).
const endWithClientHeader = "X-Moat-End-With-Client"

func (c *Client) envdBase(id string) string {
	return c.base + "/v1/sandboxes/" + url.PathEscape(id) + "/envd"
}

// headerInterceptor adds the API key and the user to every envd call.
type headerInterceptor struct {
	c    *Client
	user string
}

func (h headerInterceptor) set(hdr http.Header) {
	if h.c.apiKey != "" {
		hdr.Set("Authorization", "Bearer "+h.c.apiKey)
	}
	if h.user != "" {
		hdr.Set(userHeader, h.user)
	}
}

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Process returns a client of the sandbox's process service acting as user ("" = the
// sandbox's default user).
func (c *Client) Process(id, user string) processconnect.ProcessClient {
	return processconnect.NewProcessClient(c.http, c.envdBase(id),
		connect.WithInterceptors(headerInterceptor{c: c, user: user}))
}

// Filesystem returns a client of the sandbox's filesystem service acting as user.
func (c *Client) Filesystem(id, user string) filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(c.http, c.envdBase(id),
		connect.WithInterceptors(headerInterceptor{c: c, user: user}))
}

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	Cmd     string   // program; "/bin/bash" with Args {"-l","-c",script} for a shell line
	Args    []string // its arguments
	User    string   // "" = the sandbox's default user
	Env     map[string]string
	Workdir string
	Stdin   io.Reader // nil: /dev/null
	Stdout  io.Writer // nil: discarded
	Stderr  io.Writer // nil: discarded
	// TTY, when set, runs the command on a pseudo-terminal of this size; output arrives on
	// Stdout and Stdin feeds the terminal.
	TTY *TermSize
	// Resize delivers terminal size changes while a TTY command runs.
	Resize <-chan TermSize
	// Signals, when set, delivers signals to the command's process group while it runs,
	// as a terminal's ^C would: syscall.SIGINT, SIGTERM or SIGKILL (moat-init refuses
	// others). A signal sent before the command started is delivered once it has.
	Signals <-chan syscall.Signal
	// End, when set, receives how the command ended: its exit code (128+signal for a
	// signal), its status and, when the sandbox says more, the reason (an OOM kill).
	End *ExitError
}

// TermSize is a terminal size in cells.
type TermSize struct{ Cols, Rows uint32 }

// ExitError reports a command's exit status when it is not zero.
type ExitError struct {
	Code   int
	Status string
	// Reason says why the command ended when the sandbox knows more than its status,
	// e.g. that the kernel's OOM killer ended it (its status is then "signal: killed",
	// Code 137).
	Reason string
}

func (e *ExitError) Error() string { return e.Status }

// Exec runs a command in sandbox id, streaming its output, and returns its exit code
// (0 on success). A command that cannot start inside (missing program) exits 127 like a
// shell. Errors other than the exit status are returned as err.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (int, error) {
	pc := c.Process(id, req.User)
	start := &process.StartRequest{
		Process: &process.ProcessConfig{Cmd: req.Cmd, Args: req.Args, Envs: req.Env},
	}
	if req.Workdir != "" {
		start.Process.Cwd = &req.Workdir
	}
	if req.Stdin != nil {
		t := true
		start.Stdin = &t
	}
	if req.TTY != nil {
		start.Pty = &process.PTY{Size: &process.PTY_Size{Cols: req.TTY.Cols, Rows: req.TTY.Rows}}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begun := time.Now()
	sreq := connect.NewRequest(start)
	// The command ends when this call does (ctx cancelled, the connection lost): on a
	// terminal with SIGHUP, otherwise its process group with SIGKILL.
	sreq.Header().Set(endWithClientHeader, "1")
	stream, err := pc.Start(ctx, sreq)
	if err != nil {
		return -1, c.explain(ctx, id, fmt.Errorf("starting command: %w", err))
	}
	defer stream.Close()
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	code, started := -1, false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			started = true
			pid := ev.GetStart().GetPid()
			if req.Stdin != nil {
				go c.pumpInput(ctx, pc, pid, req.Stdin, req.TTY != nil)
			}
			if req.Signals != nil {
				go c.pumpSignals(ctx, pc, pid, req.Signals)
			}
			if req.Resize != nil {
				go func() {
					for {
						select {
						case <-ctx.Done():
							return
						case sz := <-req.Resize:
							_, _ = pc.Update(ctx, connect.NewRequest(&process.UpdateRequest{
								Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
								Pty:     &process.PTY{Size: &process.PTY_Size{Cols: sz.Cols, Rows: sz.Rows}},
							}))
						}
					}
				}()
			}
		case ev.GetData() != nil:
			d := ev.GetData()
			switch {
			case d.GetStdout() != nil:
				_, _ = stdout.Write(d.GetStdout())
			case d.GetStderr() != nil:
				_, _ = stderr.Write(d.GetStderr())
			case d.GetPty() != nil:
				_, _ = stdout.Write(d.GetPty())
			}
		case ev.GetEnd() != nil:
			// Read the stream to its end rather than cutting it: a stream cancelled
			// mid-way costs the daemon its upstream connection.
			end := ev.GetEnd()
			code = exitCode(end.GetExitCode(), end.GetExited(), end.GetStatus())
			if req.End != nil {
				*req.End = ExitError{Code: code, Status: end.GetStatus()}
				if e := end.GetError(); e != "" && e != end.GetStatus() {
					req.End.Reason = strings.TrimPrefix(e, end.GetStatus()+": ")
				}
			}
		}
	}
	if code >= 0 {
		return code, nil
	}
	if err := stream.Err(); err != nil {
		if started && ctx.Err() == nil {
			// The stream broke after the command started: the sandbox may have ended
			// (its PID 1 killed, its container ended by the OOM killer under runsc).
			// The daemon records that within about a second; wait that long for it.
			c.awaitNotRunning(ctx, id, 3*time.Second)
			if code, ok := c.endedByOOM(ctx, id, begun, req.End); ok {
				return code, nil
			}
		}
		return -1, c.explain(ctx, id, err)
	}
	return -1, c.explain(ctx, id, errors.New("command stream ended without an exit status"))
}

// endedByOOM says whether sandbox id, whose command's stream broke, was stopped because
// the OOM killer ended its container (under runsc the whole sandbox goes) at or after
// begun. The command then ended as an OOM-killed process does: code 137, and end
// (when set) says why.
func (c *Client) endedByOOM(ctx context.Context, id string, begun time.Time, end *ExitError) (int, bool) {
	sb, err := c.Get(context.WithoutCancel(ctx), id)
	if err != nil || sb.State == "running" || sb.LastOOMAt == nil || sb.LastOOMAt.Before(begun.Add(-time.Second)) {
		return 0, false
	}
	if end != nil {
		*end = ExitError{Code: 128 + 9, Status: "signal: killed", Reason: sb.Error}
		if !strings.Contains(end.Reason, "OOM") {
			end.Reason = "killed by the OOM killer: the sandbox reached its memory limit"
		}
	}
	return 128 + 9, true
}

// awaitNotRunning polls sandbox id until it is no longer running, for at most wait.
func (c *Client) awaitNotRunning(ctx context.Context, id string, wait time.Duration) {
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		sb, err := c.Get(ctx, id)
		if err != nil || sb.State != "running" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// explain replaces a transport-level envd error with the sandbox's own state when that is
// the cause: an unknown sandbox (the daemon's 404 reads as "unimplemented" to a Connect
// client) or one that is not running.
func (c *Client) explain(ctx context.Context, id string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	sb, gerr := c.Get(context.WithoutCancel(ctx), id)
	if gerr != nil {
		return gerr
	}
	if sb.State != "running" {
		msg := fmt.Sprintf("sandbox %s is %s", id, sb.State)
		if sb.Error != "" {
			msg += ": " + sb.Error
		}
		return &Error{Status: http.StatusConflict, Code: "conflict", Message: msg}
	}
	return err
}

// pumpSignals sends what sigs delivers to process pid's group until ctx ends.
func (c *Client) pumpSignals(ctx context.Context, pc processconnect.ProcessClient, pid uint32, sigs <-chan syscall.Signal) {
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			_, _ = pc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal(sig)}))
		}
	}
}

func (c *Client) pumpInput(ctx context.Context, pc processconnect.ProcessClient, pid uint32, r io.Reader, tty bool) {
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			in := &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}
			if tty {
				in = &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: append([]byte(nil), buf[:n]...)}}
			}
			if _, serr := pc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: in})); serr != nil {
				return
			}
		}
		if err != nil {
			if !tty {
				_, _ = pc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel}))
			}
			return
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// File is a file being read from a sandbox. Reading yields at most Size bytes.
type File struct {
	io.Reader
	// Size is the file's length as the sandbox announced it.
	Size   int64
	closer io.Closer
}

// Close ends the download.
func (f *File) Close() error { return f.closer.Close() }

// ReadFile opens path in sandbox id (as user) for reading. The sandbox (its moat-init)
// is not trusted, so the answer must be uncompressed and announce its length
// (Content-Length), and no more than that length is ever read: check File.Size before
// writing the content anywhere. Only regular files can be read; moat-init refuses
// devices, FIFOs and directories (ErrInvalidArgument).
func (c *Client) ReadFile(ctx context.Context, id, path, user string) (*File, error) {
	resp, err := c.getIdentity(ctx, id, "files", path, user)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength < 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("reading %s: the sandbox did not announce the file's length", path)
	}
	return &File{Reader: io.LimitReader(resp.Body, resp.ContentLength), Size: resp.ContentLength, closer: resp.Body}, nil
}

// getIdentity GETs envd route (files, moat/tar) of sandbox id for path as user, asking for
// the content as it is and refusing an answer in another encoding (the sandbox is not
// trusted). Asked explicitly, identity also turns off the transport's transparent gzip,
// which would hide the length.
func (c *Client) getIdentity(ctx context.Context, id, route, path, user string) (*http.Response, error) {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/sandboxes/"+url.PathEscape(id)+"/envd/"+route+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.sendRequest(req)
	if err != nil {
		return nil, err
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		resp.Body.Close()
		return nil, fmt.Errorf("reading %s: the sandbox answered with content encoding %.40q, not the identity asked for", path, enc)
	}
	return resp, nil
}

// WriteFile writes r to path in sandbox id (as user), creating parent directories.
func (c *Client) WriteFile(ctx context.Context, id, path, user string, r io.Reader) error {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/sandboxes/"+url.PathEscape(id)+"/envd/files?"+q.Encode(), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &Error{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: fmt.Sprintf("writing %s: %s: %s", path, resp.Status, strings.TrimSpace(string(data)))}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusConflict:
		return "conflict"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "permission_denied"
	}
	return "status_" + strconv.Itoa(status)
}
