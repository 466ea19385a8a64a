package intercept

import (
	"context"
	"net/http"
)

// Approval per use of a credential: an injection marked Approve is written into a request
// only once a person has approved that request (method, path, secret name; never the
// value). The request is held, unread past its headers, while the question waits.

// ApproveFunc decides one request a credential marked Approve would be injected into. It
// blocks until a decision, a time-out or the end of ctx (the client went away); it
// returns whether to send the request and, when not, why (for the 403 the sandbox gets).
type ApproveFunc func(ctx context.Context, q CredentialQuestion) (approved bool, reason string)

// CredentialQuestion is what is asked about one request.
type CredentialQuestion struct {
	Host         string // the bound host (normalized)
	Port         int
	Method, Path string // Path is the escaped path without the query
	Secret       string // the name of the binding's secret
}

// approved asks Approve about each injection marked Approve that would be written into r;
// it returns false when it has answered r itself (403: refused, unanswered, or no one to
// ask), true when r may go on.
func (s *session) approved(w http.ResponseWriter, r *http.Request) bool {
	for i := range s.inj {
		inj := &s.inj[i]
		if !inj.Approve || inj.ScrubOnly || !inj.applies(r.Method, r.URL) || !inj.wouldWrite(r.Header) {
			continue
		}
		q := CredentialQuestion{Host: s.host, Port: s.port, Method: r.Method, Path: r.URL.EscapedPath(), Secret: inj.Secret}
		if s.approve == nil {
			s.log.Warn("intercept: a credential needs approval and nobody can approve it", "host", s.host, "secret", inj.Secret)
			http.Error(w, "moat: the use of credential "+inj.Secret+" needs a person's approval, and this daemon has no approvals configured; nothing was sent", http.StatusForbidden)
			return false
		}
		ok, why := s.approve(r.Context(), q)
		if !ok {
			s.log.Info("intercept: credential use not approved", "host", s.host, "secret", inj.Secret, "method", r.Method, "path", q.Path, "why", why)
			http.Error(w, "moat: the use of credential "+inj.Secret+" was not approved: "+why+"; nothing was sent", http.StatusForbidden)
			return false
		}
	}
	return true
}

// wouldWrite says whether inj's value would be written into a request with headers h: a
// header binding always, a placeholder binding when its placeholder is in its header.
func (inj *Injection) wouldWrite(h http.Header) bool {
	if inj.Header != "" {
		return true
	}
	if inj.Placeholder == "" {
		return false
	}
	name := inj.PlaceholderHeader
	if name == "" {
		name = defaultPlaceholderHeader
	}
	var basic []string
	return swapInHeader(h.Clone(), name, inj.Placeholder, "x", &basic)
}
