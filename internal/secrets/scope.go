package secrets

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// Scope is where a secret may be sent, set by whoever stores it (the daemon's operator):
// every binding of the secret must stay within it (sandbox.WithinScope). It is sealed with
// the value as associated data, so an edit of the data file that widens it makes the value
// fail to decrypt. A secret without a scope (stored before moat kept scopes, or without
// hosts) cannot be bound.
type Scope struct {
	// Hosts are "HOST", "*.DOMAIN" (its subdomains, not DOMAIN itself) or either with
	// ":PORT", as in bindings: without a port, 443 (and 80 when PlainHTTP).
	Hosts []string `json:"hosts"`
	// Methods, if any, are the only HTTP methods requests carrying the value may have.
	Methods []string `json:"methods,omitempty"`
	// PathPrefix, if set, starts the path of every request carrying the value.
	PathPrefix string `json:"path_prefix,omitempty"`
	// PlainHTTP lets bindings send the value in plain HTTP too (default: TLS only).
	PlainHTTP bool `json:"plain_http,omitempty"`
	// Repositories, for a GitHub App key only, are the repositories (without owner) its
	// installation tokens may be minted for; none: any the binding names.
	Repositories []string `json:"repositories,omitempty"`
	// Headers are the request headers a binding may write the value into (its
	// placeholder_header, or the header of a header binding), in canonical form; none:
	// Authorization only. A scope stored before moat kept headers has none.
	Headers []string `json:"headers,omitempty"`
}

// DefaultHeader is the one header a scope without Headers lets the value into.
const DefaultHeader = "Authorization"

// AllowedHeaders returns the headers sc lets the value into: its Headers, else
// DefaultHeader alone.
func (sc Scope) AllowedHeaders() []string {
	if len(sc.Headers) == 0 {
		return []string{DefaultHeader}
	}
	return sc.Headers
}

// maxScopeEntries bounds each list of a scope.
const maxScopeEntries = 100

// Normalize returns sc in canonical form (hosts as NormalizeHost gives them, duplicates
// dropped, header names canonical as http.CanonicalHeaderKey gives them) or an error of
// class errdefs.ErrInvalidArgument saying what is wrong: no hosts, a host, method, path
// prefix or header a binding could not have, or more than 100 entries in a list. Every string it keeps is printable ASCII, so its JSON form (sealed with the value)
// reads back byte for byte.
func (sc Scope) Normalize() (Scope, error) {
	bad := func(format string, args ...any) (Scope, error) {
		return Scope{}, fmt.Errorf("scope: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if len(sc.Hosts) == 0 {
		return bad("name the hosts the secret may be sent to (HOST, *.DOMAIN, optionally :PORT)")
	}
	if len(sc.Hosts) > maxScopeEntries || len(sc.Methods) > maxScopeEntries || len(sc.Repositories) > maxScopeEntries || len(sc.Headers) > maxScopeEntries {
		return bad("at most %d hosts, methods, repositories and headers each", maxScopeEntries)
	}
	out := Scope{PathPrefix: sc.PathPrefix, PlainHTTP: sc.PlainHTTP}
	for _, h := range sc.Hosts {
		n, err := NormalizeHost(h)
		if err != nil {
			return bad("%v", err)
		}
		if !slices.Contains(out.Hosts, n) {
			out.Hosts = append(out.Hosts, n)
		}
	}
	for _, m := range sc.Methods {
		if !policy.IsMethod(m) {
			return bad("%.40q is not an HTTP method (upper case, e.g. GET)", m)
		}
		if !slices.Contains(out.Methods, m) {
			out.Methods = append(out.Methods, m)
		}
	}
	if sc.PathPrefix != "" && (!policy.CleanHTTPPath(sc.PathPrefix) || !printableASCII(sc.PathPrefix)) {
		return bad("path prefix %.120q must be a path as sent (printable ASCII, percent-encoded otherwise), start with / and have no empty, '.' or '..' segment, backslash or encoded '/', '\\' or '.'", sc.PathPrefix)
	}
	for _, r := range sc.Repositories {
		if !repoName(r) {
			return bad("repository %.120q is not a repository name without owner (letters, digits, '.', '-', '_')", r)
		}
		if !slices.ContainsFunc(out.Repositories, func(o string) bool { return strings.EqualFold(o, r) }) {
			out.Repositories = append(out.Repositories, r)
		}
	}
	for _, h := range sc.Headers {
		if !intercept.SwappableHeader(h) {
			return bad("%.120q is not a header the value may be written into (a header name; not Host, Content-Length, Proxy-* or another that frames or routes the request)", h)
		}
		if h = http.CanonicalHeaderKey(h); !slices.Contains(out.Headers, h) {
			out.Headers = append(out.Headers, h)
		}
	}
	return out, nil
}

// printableASCII reports whether s has only bytes from '!' to '~'.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// repoName reports whether r is a GitHub repository name (without owner): 1 to 100
// letters, digits, '.', '-' and '_', not "." or "..".
func repoName(r string) bool {
	if r == "" || len(r) > 100 || r == "." || r == ".." {
		return false
	}
	for i := 0; i < len(r); i++ {
		switch c := r[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// NormalizeHost returns the canonical form of a host entry of a binding or scope: "HOST",
// "*.DOMAIN" or either with ":PORT" (1-65535), the name lower-cased and checked by
// policy.NormalizeName (so no IP literals, URLs or bare "*"). Its error does not carry a
// class.
func NormalizeHost(h string) (string, error) {
	hostPart, portPart, hasPort := strings.Cut(h, ":")
	wild := strings.HasPrefix(hostPart, "*.")
	n, err := policy.NormalizeName(strings.TrimPrefix(hostPart, "*."))
	if err != nil {
		return "", fmt.Errorf("host %.120q: %v", h, err)
	}
	if wild {
		n = "*." + n
	}
	if hasPort {
		p, err := strconv.ParseUint(portPart, 10, 16)
		if err != nil || p == 0 {
			return "", fmt.Errorf("host %.120q: the port must be 1-65535", h)
		}
		n += ":" + strconv.FormatUint(p, 10)
	}
	return n, nil
}
