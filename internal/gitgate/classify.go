package gitgate

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// Service is what an HTTP request to a git host asks for, as far as the git gate cares.
type Service uint8

// The services. Only ReceivePack changes refs; the gate must see every such request, so
// Classify errs on the side of ReceivePack and errors.
const (
	// Other is anything that is not git smart HTTP: web pages, APIs, dumb HTTP reads.
	Other Service = iota
	// FetchAdvertisement is GET .../info/refs?service=git-upload-pack.
	FetchAdvertisement
	// Fetch is POST .../git-upload-pack.
	Fetch
	// PushAdvertisement is GET .../info/refs?service=git-receive-pack.
	PushAdvertisement
	// Push is POST .../git-receive-pack: the request ParseReceivePack reads.
	Push
)

func (s Service) String() string {
	switch s {
	case Other:
		return "other"
	case FetchAdvertisement:
		return "fetch-advertisement"
	case Fetch:
		return "fetch"
	case PushAdvertisement:
		return "push-advertisement"
	case Push:
		return "push"
	}
	return fmt.Sprintf("Service(%d)", uint8(s))
}

// Classify names the git service of a request to a git host from its method and URL, and
// the repository path before the service's suffix ("/owner/repo.git"). It reads the URL
// the way the most lenient server might, so that no spelling of a push passes as something
// else: path segments are compared without case, a "git-receive-pack" segment anywhere
// makes the request a push whatever follows it, and every "service" query parameter (keys
// without case) counts. It returns errdefs.ErrInvalidArgument, for the gate to refuse, for:
// a path that names receive-pack, upload-pack or info/refs (or a request with a service
// parameter) and is percent-encoded ("%" in the escaped path: servers differ in what they
// decode), or has "\", ";" (Java servers drop ";params" from a segment) or "." and ".."
// segments (servers differ in how they clean them); a
// malformed or ambiguous query (two service values), a service other than upload-pack and
// receive-pack, and a push service reached by a method other than the protocol's (POST
// for the service, GET or HEAD for the advertisement). WebDAV methods (git http-push's
// dumb protocol) are an error too: moat has no gate for them.
func Classify(method string, u *url.URL) (Service, string, error) {
	bad := func(why string) (Service, string, error) {
		return Other, "", fmt.Errorf("git request %s %q: %s: %w", truncate(method, 16), truncate(u.EscapedPath(), 120), why, errdefs.ErrInvalidArgument)
	}
	switch strings.ToUpper(method) {
	case "GET", "HEAD", "POST", "OPTIONS":
	case "PUT", "DELETE", "PATCH", "MKCOL", "MOVE", "COPY", "LOCK", "UNLOCK", "PROPFIND", "PROPPATCH":
		// The API of a git host may use these on other paths; the caller decides for
		// Other. They are refused only where they would be WebDAV on a repository.
		if looksLikeRepo(u.Path) {
			return bad("WebDAV-style write to a repository")
		}
		return Other, "", nil
	default:
		return bad("unknown method")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("malformed query")
	}
	var service string
	for k, vs := range q {
		if !strings.EqualFold(k, "service") {
			continue
		}
		for _, v := range vs {
			if service != "" && !strings.EqualFold(v, service) {
				return bad("more than one service")
			}
			service = v
		}
	}
	segs := strings.Split(u.Path, "/")
	// Where the request may be meant for git, spellings servers read differently are
	// refused; elsewhere (a host's web pages and API) they are the caller's business.
	lower := strings.ToLower(u.Path)
	if service != "" || strings.Contains(lower, "receive-pack") || strings.Contains(lower, "upload-pack") || strings.Contains(lower, "info/refs") {
		if strings.Contains(u.EscapedPath(), "%") || strings.ContainsAny(u.Path, "\\;") {
			return bad(`percent-encoded path, or "\" or ";" in it`)
		}
		for _, s := range segs {
			if s == "." || s == ".." {
				return bad(`"." or ".." in the path`)
			}
		}
	}
	for i, s := range segs {
		if strings.EqualFold(s, "git-receive-pack") {
			if !strings.EqualFold(method, "POST") {
				return bad("git-receive-pack without POST")
			}
			return Push, strings.Join(segs[:i], "/"), nil
		}
	}
	last := len(segs) - 1
	if last >= 1 && strings.EqualFold(segs[last], "refs") && strings.EqualFold(segs[last-1], "info") {
		repo := strings.Join(segs[:last-1], "/")
		switch {
		case strings.EqualFold(service, "git-receive-pack"):
			if !strings.EqualFold(method, "GET") && !strings.EqualFold(method, "HEAD") {
				return bad("push advertisement without GET")
			}
			return PushAdvertisement, repo, nil
		case strings.EqualFold(service, "git-upload-pack"):
			return FetchAdvertisement, repo, nil
		case service == "":
			return Other, repo, nil // dumb HTTP: a read
		}
		return bad("unknown service")
	}
	if strings.EqualFold(service, "git-receive-pack") {
		return bad("service=git-receive-pack outside info/refs")
	}
	if strings.EqualFold(segs[last], "git-upload-pack") {
		return Fetch, strings.Join(segs[:last], "/"), nil
	}
	return Other, "", nil
}

// looksLikeRepo reports whether p names something inside a repository the way dumb HTTP
// does (objects/, refs/, info/, HEAD).
func looksLikeRepo(p string) bool {
	for s := range strings.SplitSeq(strings.ToLower(p), "/") {
		switch s {
		case "objects", "refs", "info", "head", "packed-refs":
			return true
		}
		if strings.HasSuffix(s, ".git") {
			return true
		}
	}
	return false
}
