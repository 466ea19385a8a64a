// Package previews holds the pure decisions of port previews: which sandbox and port a
// request names (host-based <port>-<id>.<domain> or path-based /preview/<id>/<port>/),
// whether its caller may open it, what of the request never reaches the sandbox, which
// of the sandbox's cookies the browser may keep, and which ports a sandbox listens on
// (/proc/net/tcp). Nothing here does I/O; internal/apiserver/previews.go uses it.
package previews

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
)

// PathPrefix begins every path-based preview URL: /preview/<sandbox-id>/<port>/<rest>.
const PathPrefix = "/preview/"

// SessionCookie is the web console's session cookie: it authenticates to moat and never
// reaches a sandbox.
const SessionCookie = "moat_session"

// TokenHeader, E2BTokenHeader and TokenQuery carry a port's token (v1.PortToken). They
// never reach the sandbox.
const (
	TokenHeader    = "X-Moat-Preview-Token"
	E2BTokenHeader = "E2b-Traffic-Access-Token"
	TokenQuery     = "moat_preview_token"
)

// SharedOriginCSP is the Content-Security-Policy of previews served on the daemon's own
// origin (path-based, and E2B's header-routed ones): the page runs in an opaque origin
// (no allow-same-origin), so its scripts cannot read or act with the console's session.
const SharedOriginCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// Setting is a port's stored setting: its visibility and token ("" none). Port 0 holds
// the sandbox-wide traffic token (E2B's trafficAccessToken).
type Setting struct {
	Port       int
	Visibility string
	Token      string
}

// Target is the sandbox port a request names.
type Target struct {
	ID   string
	Port int
}

// ParsePort parses a port as a URL carries it: 1–65535, decimal digits only, no sign,
// no leading zero.
func ParsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return n, true
}

// validID reports whether s can be a sandbox ID as URLs carry it: sb- and lowercase hex
// (what sandbox.IsFullID accepts is narrower still; the caller checks that too).
func validID(s string) bool {
	if !strings.HasPrefix(s, "sb-") || len(s) > 40 || len(s) == 3 {
		return false
	}
	for i := 3; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseHost returns the sandbox port a host-based preview's Host names:
// "<port>-<sandbox-id>.<domain>". domain is the daemon's preview domain, with a :port when
// the URLs carry one (then host must carry the same); without one, a host's port is
// ignored. Names compare case-insensitively; a trailing dot is refused. domain "" matches
// nothing.
func ParseHost(host, domain string) (Target, bool) {
	if domain == "" || host == "" {
		return Target{}, false
	}
	host, domain = strings.ToLower(host), strings.ToLower(domain)
	dname, dport, dHasPort := splitHostPort(domain)
	hname, hport, hHasPort := splitHostPort(host)
	if dHasPort && (!hHasPort || hport != dport) {
		return Target{}, false
	}
	label, ok := strings.CutSuffix(hname, "."+dname)
	if !ok || strings.Contains(label, ".") {
		return Target{}, false
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok {
		return Target{}, false
	}
	port, ok := ParsePort(p)
	if !ok || !validID(id) {
		return Target{}, false
	}
	return Target{ID: id, Port: port}, true
}

// splitHostPort splits "name:port" (no brackets: preview names are DNS names).
func splitHostPort(s string) (name, port string, hasPort bool) {
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// ParsePath returns the sandbox port a path-based preview names and the rest of the path
// to forward, from the request's escaped path (URL.EscapedPath): "/preview/<id>/<port>"
// then "" (the caller redirects to the trailing slash) or "/…". The rest is forwarded as
// it came, encoded; it can only name a path of that sandbox port's server.
func ParsePath(escaped string) (t Target, rest string, ok bool) {
	after, ok := strings.CutPrefix(escaped, PathPrefix)
	if !ok {
		return Target{}, "", false
	}
	id, after, ok := strings.Cut(after, "/")
	if !ok || !validID(id) {
		return Target{}, "", false
	}
	p, rest, _ := strings.Cut(after, "/")
	port, ok := ParsePort(p)
	if !ok {
		return Target{}, "", false
	}
	if len(after) > len(p) {
		rest = "/" + rest
	}
	return Target{ID: id, Port: port}, rest, true
}

// IsPreviewPath reports whether a path is in the path-based previews' space (then no API
// route answers it, valid or not).
func IsPreviewPath(path string) bool {
	return strings.HasPrefix(path, PathPrefix) || path == strings.TrimSuffix(PathPrefix, "/")
}

// Access is what decides a preview request.
type Access struct {
	// Visibility is the port's (v1.PortPrivate, v1.PortToken, v1.PortPublic; "" private).
	Visibility string
	// Token is the port's token ("" none); Given the token the request presented.
	Token, Given string
	// MayUse: the request's caller (an API key or console session) may use the sandbox.
	MayUse bool
	// AllowPublic: the operator allows public ports (moat serve --allow-public-ports).
	AllowPublic bool
	// SandboxToken is a token for every port of the sandbox (E2B's trafficAccessToken of a
	// sandbox created with network.allowPublicTraffic false; "" none).
	SandboxToken string
}

// Allowed decides a preview request: a caller who may use the sandbox opens every port;
// a port's token (or the sandbox's traffic token) opens that port; a public port opens to
// anyone only while the operator allows public ports.
func Allowed(a Access) bool {
	if a.MayUse {
		return true
	}
	if a.Given != "" && a.SandboxToken != "" && subtle.ConstantTimeCompare([]byte(a.Given), []byte(a.SandboxToken)) == 1 {
		return true
	}
	switch a.Visibility {
	case v1.PortPublic:
		return a.AllowPublic
	case v1.PortToken:
		return a.Token != "" && a.Given != "" && subtle.ConstantTimeCompare([]byte(a.Given), []byte(a.Token)) == 1
	}
	return false
}

// GivenToken returns the port token a request presents: the X-Moat-Preview-Token header,
// E2B's e2b-traffic-access-token header, or the moat_preview_token query parameter.
func GivenToken(h http.Header, q url.Values) string {
	if t := h.Get(TokenHeader); t != "" {
		return t
	}
	if t := h.Get(E2BTokenHeader); t != "" {
		return t
	}
	return q.Get(TokenQuery)
}

// moatHeaders authenticate to moat or route inside it; none reaches a sandbox.
var moatHeaders = []string{
	"Authorization", "X-Api-Key", TokenHeader, E2BTokenHeader,
	"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Moat-User", "X-Access-Token",
}

// Strip removes from a request to forward everything that authenticates to moat: the
// API key headers, the token headers and query parameter, the console's session cookie.
// Other cookies and headers pass (the sandbox's own).
func Strip(h http.Header, u *url.URL) {
	for _, k := range moatHeaders {
		h.Del(k)
	}
	if cs := h.Values("Cookie"); len(cs) > 0 {
		h.Del("Cookie")
		var kept []string
		for _, line := range cs {
			for _, part := range strings.Split(line, ";") {
				name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
				if strings.TrimSpace(part) == "" || isMoatCookie(name) {
					continue
				}
				kept = append(kept, strings.TrimSpace(part))
			}
		}
		if len(kept) > 0 {
			h.Set("Cookie", strings.Join(kept, "; "))
		}
	}
	u.RawQuery = stripQuery(u.RawQuery)
}

// stripQuery drops from a raw query every pair whose name holds the token parameter's
// (decoded where it decodes, whatever else the pair holds); the others stay as they came,
// in their order.
func stripQuery(raw string) string {
	if !strings.Contains(strings.ToLower(raw), "moat") && !strings.Contains(raw, "%") {
		return raw
	}
	pairs := strings.Split(raw, "&")
	kept := pairs[:0]
	for _, p := range pairs {
		k, _, _ := strings.Cut(p, "=")
		if d, err := url.QueryUnescape(k); err == nil {
			k = d
		}
		if strings.Contains(strings.ToLower(k), TokenQuery) {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

// isMoatCookie reports whether a cookie name is moat's (the console's session and any
// other "moat_" cookie, whatever the case).
func isMoatCookie(name string) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(name)), "moat_")
}

// KeepSetCookie reports whether the browser may receive a Set-Cookie line of a sandbox's
// preview response. Never a cookie named like moat's, nor one with a Domain attribute
// (it could reach the console's or another sandbox's host). On the daemon's own origin
// (prefix is the preview's /preview/<id>/<port>, "" for a host-based preview) only a
// cookie scoped under the prefix: with no Path (the browser scopes it to the request's
// directory, under the prefix) or a Path under it.
func KeepSetCookie(line, prefix string) bool {
	parts := strings.Split(line, ";")
	name, _, ok := strings.Cut(parts[0], "=")
	if !ok || isMoatCookie(name) {
		return false
	}
	for _, a := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(a), "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "domain":
			return false
		case "path":
			if v = strings.TrimSpace(v); prefix != "" && v != prefix && !strings.HasPrefix(v, prefix+"/") {
				return false
			}
		}
	}
	return true
}

// ValidVisibility reports whether v is a visibility a PUT may set.
func ValidVisibility(v string) bool {
	return v == v1.PortPrivate || v == v1.PortToken || v == v1.PortPublic
}

// HostURL is the host-based URL of a port ("" without a preview domain); scheme is http
// or https.
func HostURL(scheme, domain string, t Target) string {
	if domain == "" {
		return ""
	}
	return scheme + "://" + strconv.Itoa(t.Port) + "-" + t.ID + "." + domain + "/"
}

// PathURL is the path-based URL of a port, relative to the daemon's address.
func PathURL(t Target) string {
	return PathPrefix + t.ID + "/" + strconv.Itoa(t.Port) + "/"
}
