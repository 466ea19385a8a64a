package intercept

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

// GitObjects makes the git gate decide pushes on their objects (GitGate.Objects): a push
// its refs allow is read whole into a spool file, its pack received into the sandbox's
// quarantine repository for the remote (with the bases fetched from the remote through
// this same session, so the credential is injected as for any request and never handed
// to git), and then
//   - an update of an existing ref must fast-forward it (unless the policy allows force
//     pushes);
//   - the paths that differ between the pushed commit and the remote's default branch
//     head (not only the new commits: a new branch at a commit that already changes a
//     workflow is caught) must not match a protected glob.
//
// Only then are the bytes the sandbox sent forwarded, unchanged. A push that cannot be
// checked (too large, unreadable, objects refused, remote unreachable) is refused with
// git's "unpack" error.
type GitObjects struct {
	// Quarantine returns the sandbox's quarantine for remote ("host:port/path.git"),
	// creating it on first use. Required.
	Quarantine func(ctx context.Context, remote string) (*safegit.Quarantine, error)
	// SpoolDir is a moat-owned private directory for push bodies being decided; the files
	// are unlinked at once. Required.
	SpoolDir string
	// Protected matches the touched paths; nil means gitgate.DefaultProtected, ASCII case
	// folded (a case-insensitive checkout reads .GitHub/Workflows as .github/workflows).
	Protected *gitgate.PathMatcher
	// MaxBody bounds a push's body as sent (default 512 MiB).
	MaxBody int64
	// Timeout bounds reading the body, and separately deciding on it (default 5 min).
	Timeout time.Duration
	// Hold, if set, keeps a push whose only problem is protected paths (its refs are
	// allowed and fast-forward) for a person to approve instead of refusing it: it stores
	// the push (request and spooled body) and its change record under the push's change
	// id. An error refuses the push as if Hold were unset.
	Hold func(ctx context.Context, p HeldPush) error
	// Reported, if set, receives the change reports of an allowed push, computed after it
	// was forwarded (off the push's path; its event had none and ReportsLater set). A held
	// or refused push's event carries its reports.
	Reported func(changeID string, reports map[string]*safegit.ChangeReport, reportErr string)
}

// HeldPush is a push the gate holds for approval (GitObjects.Hold).
type HeldPush struct {
	Event GitEvent // the decision, as recorded (Held set)
	// Method, Path, RawQuery and Header are the request as the sandbox sent it (Header:
	// the headers changes.KeptHeaders names); Body is its body as sent (the spool, at
	// offset 0), Size bytes.
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   io.Reader
	Size                   int64
}

// objDecision is what the objects say about a push.
type objDecision struct {
	d        gitgate.Decision // with the protected paths
	holdable bool             // refused for protected paths only
	hits     map[string][]gitgate.Hit
	size     int64 // the spool's size
	// What reports need: the quarantine, the remote's default branch head, the push.
	q    *safegit.Quarantine
	base string
	req  *gitgate.Request
	repo string
}

// fetchKeyHeader carries the key of the session's fetch listener (fetchInto).
const fetchKeyHeader = "X-Moat-Fetch-Key"

const (
	defaultGitMaxBody = 512 << 20
	defaultGitTimeout = 5 * time.Minute
)

// inspectPush spools the rest of a push whose refs are allowed (head: the bytes already
// read) and decides it on its objects. It returns the spool (at offset 0, for forwarding;
// nil when unpackErr is set) and the decision; unpackErr, when not empty, refuses the push
// as undecidable, for git's "unpack" line.
func (s *session) inspectPush(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, head []byte, req *gitgate.Request, repo string) (*os.File, objDecision, string) {
	o := s.git.Objects
	maxBody, timeout := o.MaxBody, o.Timeout
	if maxBody <= 0 {
		maxBody = defaultGitMaxBody
	}
	if timeout <= 0 {
		timeout = defaultGitTimeout
	}
	refuse := func(client string, err error) (*os.File, objDecision, string) {
		s.log.Warn("git gate: push not checkable", "host", s.host, "repo", repo, "err", err)
		return nil, objDecision{}, "moat: " + client
	}

	f, err := os.CreateTemp(o.SpoolDir, "push-*")
	if err != nil {
		return refuse("could not keep the push to check it", err)
	}
	_ = os.Remove(f.Name())
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	n, err := io.Copy(f, io.MultiReader(strings.NewReader(string(head)), io.LimitReader(r.Body, maxBody+1-int64(len(head)))))
	switch {
	case err != nil:
		f.Close()
		return refuse("could not read the push", err)
	case n > maxBody:
		f.Close()
		w.Header().Set("Connection", "close")
		return refuse(fmt.Sprintf("the push is larger than %d bytes", maxBody), errdefs.ErrResourceExhausted)
	}

	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	od, client, err := s.decideObjects(ctx, f, r, req, repo, maxBody)
	if err != nil {
		f.Close()
		return refuse(client, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return refuse("could not keep the push to check it", err)
	}
	od.size = n
	return f, od, ""
}

// decideObjects receives the spooled push f into the quarantine and decides it. On error,
// client is what the sandbox is told.
func (s *session) decideObjects(ctx context.Context, f *os.File, r *http.Request, req *gitgate.Request, repo string, maxBody int64) (objDecision, string, error) {
	o := s.git.Objects
	q, err := o.Quarantine(ctx, s.authority+repo)
	if err != nil {
		return objDecision{}, "the quarantine repository is unavailable", err
	}
	// First the remote's HEAD and the refs the push updates (their old commits, usually
	// the bases of the thin pack); if the pack needs more (a new branch made from another
	// one), every branch, and the pack once more.
	var updated []string
	for _, c := range req.Commands {
		if !c.IsCreate() && !c.IsDelete() {
			updated = append(updated, c.Ref)
		}
	}
	fetchedAll := false
	fetch := func(refs []string) error {
		fetchedAll = fetchedAll || refs == nil
		return s.fetchInto(ctx, q, r, repo, refs)
	}
	if err := fetch(updated); err != nil {
		// A ref the push updates may be gone from the remote meanwhile: every branch.
		if len(updated) == 0 {
			return objDecision{}, "could not fetch from " + s.host + " to check the push", err
		}
		if err := fetch(nil); err != nil {
			return objDecision{}, "could not fetch from " + s.host + " to check the push", err
		}
	}
	receive := func() error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		dec, err := gitgate.DecodeBody(f, r.Header.Get("Content-Encoding"), maxBody+defaultGitMaxHead)
		if err != nil {
			return err
		}
		again, err := gitgate.ParseReceivePack(bufio.NewReaderSize(dec, 64<<10), gitgate.Limits{})
		if err != nil {
			return err
		}
		if again.Pack == nil {
			return nil
		}
		_, err = q.ReceivePack(ctx, again.Pack)
		return err
	}
	if err := receive(); err != nil {
		if errors.Is(err, errdefs.ErrResourceExhausted) {
			return objDecision{}, "the push is too large to check", err
		}
		s.log.Debug("git gate: pack needs more of the remote; fetching every branch", "host", s.host, "repo", repo, "err", err)
		if ferr := fetch(nil); ferr != nil {
			return objDecision{}, "could not fetch from " + s.host + " to check the push", ferr
		}
		if err := receive(); err != nil {
			return objDecision{}, "the pushed objects were refused (incomplete or malformed)", err
		}
	}
	// The commits the decision reads must all be here; a new branch made at a commit the
	// remote has on another branch comes with no objects at all.
	missing, err := missingCommits(ctx, q, req)
	if err == nil && missing && !fetchedAll {
		if err = fetch(nil); err == nil {
			missing, err = missingCommits(ctx, q, req)
		}
	}
	switch {
	case err != nil:
		return objDecision{}, "could not fetch from " + s.host + " to check the push", err
	case missing:
		return objDecision{}, "the push names commits neither it nor the remote has; fetch and push again", errors.New("commits missing after fetching every branch")
	}
	base, err := q.ResolveRef(ctx, safegit.RemoteHEAD)
	if err != nil {
		return objDecision{}, "could not read the remote's default branch", err
	}
	match := o.Protected
	if match == nil {
		if match, err = gitgate.NewPathMatcher(gitgate.DefaultProtected(), gitgate.MatcherOptions{CaseInsensitive: true}); err != nil {
			return objDecision{}, "internal error", err
		}
	}
	ff := map[string]bool{}
	hits := map[string][]gitgate.Hit{}
	for _, c := range req.Commands {
		if c.IsDelete() {
			continue
		}
		if !c.IsCreate() {
			anc, err := q.IsAncestor(ctx, c.Old, c.New)
			if err != nil {
				return objDecision{}, "could not compare the commits", err
			}
			ff[c.Ref] = anc
		}
		paths, err := q.ChangedPaths(ctx, base, c.New)
		if err != nil {
			return objDecision{}, c.Ref + ": could not list the paths the push changes", err
		}
		h, err := match.Match(paths)
		if err != nil {
			return objDecision{}, c.Ref + ": " + clientReason(err), err
		}
		if len(h) > 0 {
			hits[c.Ref] = h
		}
	}
	d := s.git.Policy.Decide(req, func(ref, _, _ string) bool { return ff[ref] })
	od := objDecision{d: gitgate.WithProtected(d, hits), hits: hits, q: q, base: base, req: req, repo: repo}
	od.holdable = changes.Holdable(d, od.d)
	return od, "", nil
}

// reports computes the change report of each ref of the push od decided (for its change
// record; the decision is made): from the old commit, or for a new ref from the remote's
// default branch head. reportErr says why a report is missing.
func (s *session) reports(ctx context.Context, od objDecision) (map[string]*safegit.ChangeReport, string) {
	out := map[string]*safegit.ChangeReport{}
	reportErr := ""
	for _, c := range od.req.Commands {
		if c.IsDelete() {
			continue
		}
		from := od.base
		if !c.IsCreate() {
			from = c.Old
		}
		rep, err := od.q.Report(ctx, from, c.New)
		if err != nil {
			s.log.Warn("git gate: change report", "host", s.host, "repo", od.repo, "ref", c.Ref, "err", err)
			reportErr = "no report for " + c.Ref + ": " + clientReason(err)
			continue
		}
		out[c.Ref] = &rep
	}
	return out, reportErr
}

// missingCommits says whether an old or new commit of req's commands is not in q.
func missingCommits(ctx context.Context, q *safegit.Quarantine, req *gitgate.Request) (bool, error) {
	for _, c := range req.Commands {
		for _, id := range []string{c.Old, c.New} {
			if strings.Trim(id, "0") == "" {
				continue
			}
			ok, err := q.HasCommit(ctx, id)
			if err != nil || !ok {
				return true, err
			}
		}
	}
	return false, nil
}

// fetchInto fetches refs (none: every branch) and the remote's HEAD into q through this session: git
// talks plain HTTP to a listener on the host's loopback that lives for this fetch only,
// under a random path, and each of its requests is served as the sandbox's own (the
// push's Authorization header, which holds the placeholder, goes with them), so the
// egress policy applies and the credential is injected on the way out. git's argv and
// environment never hold a credential. The listener serves only fetches from repo, and
// only to requests with the key header, which only git's environment holds.
func (s *session) fetchInto(ctx context.Context, q *safegit.Quarantine, push *http.Request, repo string, refs []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var tok, key [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		ln.Close()
		return err
	}
	if _, err := rand.Read(key[:]); err != nil {
		ln.Close()
		return err
	}
	// The path is in the argv of git's remote helper (any local user can read it); the
	// key header is only in git's environment (root's to read).
	base, keyValue := "/"+hex.EncodeToString(tok[:]), hex.EncodeToString(key[:])
	auth := push.Header.Values("Authorization")
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          s.proxy.ErrorLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, ok := strings.CutPrefix(r.URL.Path, base)
			if !ok || r.TLS != nil || subtle.ConstantTimeCompare([]byte(r.Header.Get(fetchKeyHeader)), []byte(keyValue)) != 1 {
				http.NotFound(w, r)
				return
			}
			out := r.Clone(r.Context())
			out.URL.Path, out.URL.RawPath = p, ""
			// Only a fetch from this repository: whoever else learnt the path gets nothing
			// else out of the sandbox's credential.
			if svc, rp, err := gitgate.Classify(out.Method, out.URL); err != nil || rp != repo || (svc != gitgate.Fetch && svc != gitgate.FetchAdvertisement) {
				http.Error(w, "not a fetch from "+repo, http.StatusForbidden)
				return
			}
			out.Host, out.RequestURI = s.authority, ""
			out.Header.Del("Authorization")
			out.Header.Del(fetchKeyHeader)
			for _, a := range auth {
				out.Header.Add("Authorization", a)
			}
			s.ServeHTTP(w, out)
		}),
	}
	go srv.Serve(ln)
	defer srv.Close()
	return q.FetchHTTP(ctx, "http://"+ln.Addr().String()+base+repo, fetchKeyHeader+": "+keyValue, refs)
}
