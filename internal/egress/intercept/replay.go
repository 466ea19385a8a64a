package intercept

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
)

// approvedKey marks, in a request's context, a push moat sends again because a person
// approved it (Replay). Only moat makes such contexts: a request read from a sandbox
// connection never carries it.
type approvedKey struct{}

func approved(r *http.Request) bool { return r.Context().Value(approvedKey{}) != nil }

// maxReplayAnswer bounds what is kept of the remote's answer to a replayed push.
const maxReplayAnswer = 1 << 20

// ReplayResult is the remote's answer to a replayed push.
type ReplayResult struct {
	Status      int
	ContentType string
	Body        []byte // at most 1 MiB
	Truncated   bool
}

// Replay sends r, a push the git gate held and a person approved, to host:port as a
// request of the sandbox on a new session with cfg (the sandbox's injections, egress
// Check and git gate, as Serve gets them): the credential is injected and the answer
// scrubbed exactly as for the original push; the gate lets this push through without
// deciding it again (its refs were decided when it was held; the remote still refuses
// it if its ref moved since). dial connects to the policy-checked upstream. r's Host and
// URL host are set to the session's authority.
func Replay(ctx context.Context, r *http.Request, host string, port int, dial func(context.Context) (net.Conn, error), cfg Config) (ReplayResult, error) {
	if cfg.Git == nil {
		return ReplayResult{}, errors.New("intercept: replaying a push without a git gate")
	}
	s, err := newSession(host, port, dial, cfg, false)
	if err != nil {
		return ReplayResult{}, err
	}
	if s.own != nil {
		defer s.own.CloseIdleConnections()
	}
	r = r.WithContext(context.WithValue(ctx, approvedKey{}, true))
	r.Host, r.URL.Host, r.URL.Scheme, r.RequestURI = s.authority, s.authority, "https", ""
	w := &bufferWriter{h: http.Header{}}
	s.ServeHTTP(w, r)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return ReplayResult{Status: w.status, ContentType: w.h.Get("Content-Type"), Body: w.buf.Bytes(), Truncated: w.truncated}, nil
}

// bufferWriter is the answer of a replayed request, kept in memory (bounded).
type bufferWriter struct {
	h         http.Header
	status    int
	buf       bytes.Buffer
	truncated bool
}

func (w *bufferWriter) Header() http.Header { return w.h }

func (w *bufferWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
}

func (w *bufferWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if room := maxReplayAnswer - w.buf.Len(); len(b) > room {
		w.buf.Write(b[:room])
		w.truncated = true
		return len(b), nil
	}
	return w.buf.Write(b)
}

// Flush is a no-op: the answer is read when the exchange is over.
func (w *bufferWriter) Flush() {}
