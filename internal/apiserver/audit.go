package apiserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/moatdev/moat/api/envd/process"
	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
)

// AuditLog is the daemon's audit log (SetAudit; internal/daemon/audit.go).
type AuditLog interface {
	// Audit returns records with seq > after, of sandbox ("" every one), from since, at
	// most limit (0: all), oldest first.
	Audit(ctx context.Context, sandbox string, since time.Time, after int64, limit int) ([]v1.AuditRecord, error)
	// VerifyAudit checks the whole chain and its signed checkpoints.
	VerifyAudit(ctx context.Context) (v1.AuditVerification, error)
	// Record appends a record (exec and file writes through the API).
	Record(ctx context.Context, sandbox, kind, detail string)
}

// SetAudit sets the audit log the audit routes serve and the envd forwarder records into.
func (s *Server) SetAudit(a AuditLog) { s.auditLog = a }

// auditRoutes: the audit log holds every tenant's events, so it is the operator's
// (socketOnly), like API keys and secrets.
func (s *Server) auditRoutes() []route {
	return []route{
		{"GET /v1/audit", s.listAudit, socketOnly},
		{"GET /v1/audit/verify", s.verifyAudit, socketOnly},
	}
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	if s.auditLog == nil {
		writeError(w, fmt.Errorf("the audit log is not available: %w", errdefs.ErrNotImplemented))
		return
	}
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, fmt.Errorf("since %q: not an RFC 3339 time: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		since = t
	}
	after, limit := int64(0), 0
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, fmt.Errorf("after %q: not a sequence number: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, fmt.Errorf("limit %q: not a count: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		limit = n
	}
	recs, err := s.auditLog.Audit(r.Context(), q.Get("sandbox"), since, after, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	if recs == nil {
		recs = []v1.AuditRecord{}
	}
	writeJSON(w, http.StatusOK, recs)
}

func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request) {
	if s.auditLog == nil {
		writeError(w, fmt.Errorf("the audit log is not available: %w", errdefs.ErrNotImplemented))
		return
	}
	v, err := s.auditLog.VerifyAudit(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// auditEnvd records an exec or a file write forwarded to a sandbox's moat-init: the
// command and its user (from the RPC body; never its environment, which may hold values),
// or the written path. body is the whole RPC request (nil for streamed files). For an exec
// it returns r carrying what auditExecEnd needs to record the exit code.
func (s *Server) auditEnvd(r *http.Request, id, rest string, body []byte) *http.Request {
	if s.auditLog == nil {
		return r
	}
	switch {
	case strings.HasSuffix(rest, "process.Process/Start"):
		d := execSummary(body, r.Header.Get(UserHeader))
		if r.RemoteAddr != "" && r.RemoteAddr != "@" {
			d += " from " + r.RemoteAddr
		}
		s.auditLog.Record(r.Context(), id, "exec", d)
		return r.WithContext(context.WithValue(r.Context(), execAudit{}, execEnd{log: s.auditLog, id: id, cmd: d}))
	case (rest == "/files" || rest == "/moat/tar") && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		d := fmt.Sprintf("%s %s path=%q size=%d", r.Method, rest, r.URL.Query().Get("path"), r.ContentLength)
		if u := r.URL.Query().Get("username"); u != "" {
			d += " user=" + u
		}
		s.auditLog.Record(r.Context(), id, "file_write", d)
	}
	return r
}

// execAudit is the context key of an exec's execEnd.
type execAudit struct{}

// execEnd is what the exec_end record needs: where to write and the exec's summary.
type execEnd struct {
	log     AuditLog
	id, cmd string
}

// auditExecEnd (the envd proxy's ModifyResponse) wraps an exec's Connect protobuf response
// stream so that its end event is recorded as an exec_end record (exit code, pid) as it
// passes to the client; a stream that ends without one records that.
func auditExecEnd(resp *http.Response) error {
	e, ok := resp.Request.Context().Value(execAudit{}).(execEnd)
	if !ok || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/connect+proto") {
		return nil
	}
	resp.Body = &execStream{ReadCloser: resp.Body, ctx: context.WithoutCancel(resp.Request.Context()), e: e}
	return nil
}

// execStream reads Connect envelopes as they pass: small messages are decoded (start and
// end events), large ones (output) skipped without copying.
type execStream struct {
	io.ReadCloser
	ctx  context.Context
	e    execEnd
	sc   envelopeScanner
	done bool
}

func (x *execStream) Read(p []byte) (int, error) {
	n, err := x.ReadCloser.Read(p)
	x.sc.feed(p[:n])
	if err != nil {
		x.finish()
	}
	return n, err
}

func (x *execStream) Close() error {
	x.finish()
	return x.ReadCloser.Close()
}

func (x *execStream) finish() {
	if x.done {
		return
	}
	x.done = true
	d := x.e.cmd
	if x.sc.pid != 0 {
		d += fmt.Sprintf(" pid=%d", x.sc.pid)
	}
	if x.sc.ended {
		d += fmt.Sprintf(" exit=%d", x.sc.exit)
	} else {
		d += " exit=unknown (the stream ended without an end event)"
	}
	x.e.log.Record(x.ctx, x.e.id, "exec_end", d)
}

// envelopeScanner follows a stream of Connect envelopes (flags byte, 4-byte big-endian
// length, message) fed in arbitrary pieces, and reads process.StartResponse messages of
// at most maxScanned bytes for their start (pid) and end (exit code) events. Pure.
type envelopeScanner struct {
	hdr   []byte // the envelope header being read
	need  int    // bytes of the current message still to come
	msg   []byte // the current message, when small enough to decode
	skip  bool   // the current message is too large: skipped
	gzip  bool   // the current message is compressed (flag 1; Connect-Content-Encoding gzip)
	pid   uint32
	exit  int32
	ended bool
}

const maxScanned = 4096

func (s *envelopeScanner) feed(b []byte) {
	for len(b) > 0 {
		if s.need == 0 && (len(s.hdr) < 5) {
			k := min(5-len(s.hdr), len(b))
			s.hdr = append(s.hdr, b[:k]...)
			b = b[k:]
			if len(s.hdr) == 5 {
				s.need = int(binary.BigEndian.Uint32(s.hdr[1:5]))
				s.skip = s.hdr[0]&^1 != 0 || s.need > maxScanned
				s.gzip = s.hdr[0]&1 != 0
				s.msg = s.msg[:0]
				if s.need == 0 {
					s.hdr = s.hdr[:0]
				}
			}
			continue
		}
		k := min(s.need, len(b))
		if !s.skip {
			s.msg = append(s.msg, b[:k]...)
		}
		b, s.need = b[k:], s.need-k
		if s.need == 0 {
			if !s.skip {
				s.decode(s.msg)
			}
			s.hdr = s.hdr[:0]
		}
	}
}

func (s *envelopeScanner) decode(msg []byte) {
	if s.gzip {
		zr, err := gzip.NewReader(bytes.NewReader(msg))
		if err != nil {
			return
		}
		if msg, err = io.ReadAll(io.LimitReader(zr, 16*maxScanned)); err != nil {
			return
		}
	}
	var r process.StartResponse
	if proto.Unmarshal(msg, &r) != nil {
		return
	}
	if st := r.GetEvent().GetStart(); st != nil {
		s.pid = st.GetPid()
	}
	if end := r.GetEvent().GetEnd(); end != nil {
		s.ended, s.exit = true, end.GetExitCode()
	}
}

// auditAPI records a call that changes something (not GET or HEAD), by the caller in
// r's context, with the address it came from (an API key's TCP peer): the audit log's
// "api" records, API-key use among them. Calls forwarded to a sandbox (envd) are recorded
// by auditEnvd as exec and file writes instead. It records the request, before its
// outcome: the lifecycle records say what happened.
func (s *Server) auditAPI(r *http.Request) {
	if s.auditLog == nil || r.Method == http.MethodGet || r.Method == http.MethodHead || strings.Contains(r.URL.Path, "/envd/") {
		return
	}
	d := r.Method + " " + r.URL.Path
	if r.RemoteAddr != "" && r.RemoteAddr != "@" {
		d += " from " + r.RemoteAddr
	}
	s.auditLog.Record(r.Context(), pathSandbox(r.URL.Path), "api", d)
}

// pathSandbox is the sandbox a path names (/v1/sandboxes/ID/..., E2B /sandboxes/ID/...),
// or "".
func pathSandbox(p string) string {
	for _, prefix := range []string{"/v1/sandboxes/", "/sandboxes/"} {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			return id
		}
	}
	return ""
}

// execSummary is the command of a process.Process/Start request (cmd, args, cwd), its
// environment left out. The body is Connect: a streaming request is enveloped (a flag byte
// and a 4-byte length before the message), in protobuf or JSON; anything else is
// summarised by its size.
func execSummary(body []byte, user string) string {
	msg := body
	if len(msg) >= 5 && msg[0]&^1 == 0 && int(binary.BigEndian.Uint32(msg[1:5])) == len(msg)-5 {
		msg = msg[5:]
	}
	var req process.StartRequest
	var cmd string
	var args []string
	var cwd *string
	if err := proto.Unmarshal(msg, &req); err == nil && req.GetProcess().GetCmd() != "" {
		cmd, args, cwd = req.GetProcess().GetCmd(), req.GetProcess().GetArgs(), req.GetProcess().Cwd
	} else {
		var j struct {
			Process struct {
				Cmd  string   `json:"cmd"`
				Args []string `json:"args"`
				Cwd  *string  `json:"cwd"`
			} `json:"process"`
		}
		if json.Unmarshal(msg, &j) == nil {
			cmd, args, cwd = j.Process.Cmd, j.Process.Args, j.Process.Cwd
		}
	}
	d := ""
	if cmd == "" {
		d = fmt.Sprintf("(%d-byte request)", len(body))
	} else {
		d = strconv.Quote(cmd)
		for _, a := range args {
			d += " " + strconv.Quote(a)
		}
		if cwd != nil {
			d += " cwd=" + strconv.Quote(*cwd)
		}
	}
	if user != "" {
		d += " user=" + user
	}
	if len(d) > 2048 {
		d = d[:2048] + "…"
	}
	return d
}
