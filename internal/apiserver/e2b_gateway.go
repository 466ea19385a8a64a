package apiserver

import (
	"net/http"
	"time"

	"github.com/moatdev/moat/internal/envdauth"
	"github.com/moatdev/moat/internal/sandbox"
)

// e2bGateway forwards an E2B SDK's envd request (it names its sandbox in E2b-Sandbox-Id)
// to that sandbox's moat-init through the gateway namespace. The request keeps its own
// X-Access-Token, which moat-init checks. A sandbox that is not running answers 502, as
// E2B's edge does: the SDK's isRunning() reads that as "not running". auth is the
// listener's (nil: the unix socket): a request for another port is a preview, decided
// like any other.
func (s *Server) e2bGateway(w http.ResponseWriter, r *http.Request, auth Authenticator) {
	id := r.Header.Get(e2bSandboxHeader)
	if p := r.Header.Get(e2bPortHeader); p != "" && p != envdPort {
		s.e2bPreview(w, r, auth, id, p) // previews.go
		return
	}
	sb, err := s.sandboxes.Get(r.Context(), id)
	if err != nil || sb.Warm {
		writeGone(w, id, "no such sandbox")
		return
	}
	if sb.State != sandbox.StateRunning && !sandbox.Resumable(sb) {
		writeGone(w, id, "it is "+string(sb.State))
		return
	}
	// moat-init checks the token too; checking it here first keeps requests without it
	// from costing the daemon anything (an RPC body is read whole before forwarding), and
	// from starting a sandbox stopped for idleness.
	if r.URL.Path != "/health" && !envdauth.NewToken(sb.AccessToken).Equal(r.Header.Get("X-Access-Token")) {
		const msg = "invalid or missing access token (X-Access-Token)"
		if r.URL.Path == "/files" {
			writeJSON(w, http.StatusUnauthorized, e2bError{Code: http.StatusUnauthorized, Message: msg})
		} else {
			// An RPC: a Connect error, as moat-init itself would answer.
			writeJSON(w, http.StatusUnauthorized, map[string]string{"code": "unauthenticated", "message": msg})
		}
		return
	}
	// A sandbox stopped for idleness (or by its timeout, with autoResume) starts again on
	// an authenticated request; a health probe (the SDK's isRunning) is not one.
	if r.URL.Path != "/health" {
		var release func()
		if sb, release, err = s.acquireStarting(r.Context(), sb); err != nil { // e2b_templates.go
			writeGone(w, id, "it could not be resumed: "+err.Error())
			return
		}
		defer release()
	}
	if sb.State != sandbox.StateRunning {
		writeGone(w, id, "it is "+string(sb.State))
		return
	}
	s.forward(w, r, envdDest{id: sb.ID, rest: r.URL.Path, e2b: true})
}

// e2bSignedFiles routes a signed file URL (E2B's uploadUrl/downloadUrl): it carries no
// header naming its sandbox, only a signature made with that sandbox's access token, so
// the running sandbox whose token verifies it is the one. moat-init verifies it again.
func (s *Server) e2bSignedFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	// As moat-init: the named user, or without one the unnamed and the default user.
	users := []string{q.Get("username")}
	list, err := s.sandboxes.List(r.Context())
	if err != nil {
		writeE2BError(w, err)
		return
	}
	now := time.Now()
	for _, sb := range list {
		if sb.State != sandbox.StateRunning && !sandbox.Resumable(sb) || sb.AccessToken == "" {
			continue
		}
		tok := envdauth.NewToken(sb.AccessToken)
		cand := users
		if users[0] == "" {
			cand = []string{"", sb.User}
		}
		if tok.VerifySignature(q.Get("signature"), q.Get("path"), op, cand, q.Get("signature_expiration"), now) == nil {
			cur, release, err := s.acquireStarting(r.Context(), sb)
			if err != nil || cur.State != sandbox.StateRunning {
				break
			}
			defer release()
			s.forward(w, r, envdDest{id: sb.ID, rest: "/files", e2b: true})
			return
		}
	}
	writeJSON(w, http.StatusUnauthorized, e2bError{Code: http.StatusUnauthorized, Message: "invalid or expired signature, or its sandbox is not running"})
}
