package intercept

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

// GitGate is the git gate of one sandbox on an intercepted host (Config.Git): every git
// push over smart HTTP to the host is decided before anything of it goes upstream.
//
// What it does, per request (gitgate.Classify):
//   - a push (POST …/git-receive-pack): the commands are read from the body (bounded in
//     size and time) and decided with Policy; a refused push is answered by moat with a
//     git report ("remote: moat: …", git exits non-zero) and nothing reaches the
//     upstream; an allowed one is forwarded byte for byte (the bytes read, then the rest
//     of the body) with the injections, as any request;
//   - a push advertisement (GET …/info/refs?service=git-receive-pack): the upstream's
//     answer loses the push-cert and push-options capabilities (gitgate.FilterAdvertisement);
//   - a request Classify refuses (a spelling of a git endpoint servers read differently,
//     WebDAV writes to a repository): 403 with the reason.
//
// With Objects set (the daemon sets it), a push its refs allow is then decided on its
// objects before anything is forwarded: fast-forward and protected paths (GitObjects).
// Without it, updates of an existing ref under the prefix count as fast-forwards and the
// objects are not looked at.
type GitGate struct {
	Policy *gitgate.Policy // required
	// Record, if set, is called once for each push decided and each git request refused
	// for its form.
	Record func(GitEvent)
	// MaxHead bounds the decoded bytes of a push read before its pack (commands, shallow
	// lines, push options); default 1 MiB.
	MaxHead int64
	// ReadTimeout bounds reading a push's commands, and, for a refused push, the rest of
	// its body (default 30 s each).
	ReadTimeout time.Duration
	// MaxDrain bounds what is read and discarded of a refused push's body before the
	// answer, so that git, still sending its pack, reads moat's report instead of a reset
	// connection (default 64 MiB; past it the connection is closed after the answer).
	MaxDrain int64
	// Objects, if set, decides pushes the ref rules allow on their objects: fast-forward
	// and protected paths (see GitObjects). Without it, updates under the prefix count as
	// fast-forwards and paths are not looked at.
	Objects *GitObjects
}

// GitEvent is one decision of the git gate, for the egress log and the change records.
type GitEvent struct {
	Service gitgate.Service
	Repo    string // the repository path, e.g. "/owner/repo.git"; "" when unknown
	// Decision is the decision on a push whose commands were read (Err nil).
	Decision gitgate.Decision
	// Err is why a request was refused before any decision on its refs: its URL, body or
	// framing. Nothing of it went upstream.
	Err error

	// For a push whose commands were read (also when Err says it could not be checked):
	// its change id ("ch-…", new for each push), the remote ("host:port/path") and the
	// commands.
	ChangeID string
	Remote   string
	Commands []gitgate.Command
	// Objects: the push was decided on its objects (GitObjects); then Hits are the
	// protected paths by ref, Reports the change reports by ref, and ReportErr why a
	// report is missing.
	Objects   bool
	Hits      map[string][]gitgate.Hit
	Reports   map[string]*safegit.ChangeReport
	ReportErr string
	// Held: the push was held for approval (GitObjects.Hold) rather than refused.
	Held bool
	// ReportsLater: the reports come through GitObjects.Reported (an allowed push).
	ReportsLater bool
}

const (
	defaultGitMaxHead     = 1 << 20
	defaultGitReadTimeout = 30 * time.Second
	defaultGitMaxDrain    = 64 << 20
)

// gate runs the git gate on r, before anything of it is sent. It returns false when it
// has answered the request itself; otherwise r (its body, for an allowed push) is ready
// to go upstream.
func (s *session) gate(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	g := s.git
	svc, repo, err := gitgate.Classify(r.Method, r.URL)
	if err == nil && svc == gitgate.Push && approved(r) {
		return true // decided by a person (Replay)
	}
	if err != nil {
		s.recordGit(GitEvent{Service: svc, Err: err})
		http.Error(w, "moat: git gate: "+clientReason(err), http.StatusForbidden)
		return false
	}
	switch svc {
	case gitgate.PushAdvertisement:
		ex.advert = true
		return true
	case gitgate.Push:
	default:
		return true
	}

	timeout := g.ReadTimeout
	if timeout <= 0 {
		timeout = defaultGitReadTimeout
	}
	maxHead := g.MaxHead
	if maxHead <= 0 {
		maxHead = defaultGitMaxHead
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	rec := &recorder{r: r.Body, max: int(2*maxHead + 64<<10)}
	req, probe, err := readPush(rec, r.Header.Get("Content-Encoding"), maxHead)
	if err != nil {
		s.recordGit(GitEvent{Service: svc, Repo: repo, Err: err})
		s.log.Info("git gate: push refused unread", "host", s.host, "repo", repo, "err", err)
		http.Error(w, "moat: git gate: "+clientReason(err), http.StatusForbidden)
		return false
	}
	if probe {
		// git's probe before a large push ("0000": no commands) changes nothing.
		_ = rc.SetReadDeadline(time.Time{})
		r.Body = readCloser{io.MultiReader(bytes.NewReader(rec.buf), r.Body), r.Body}
		return true
	}
	// First the ref rules alone: every update under the prefix counts as a fast-forward
	// here (refs outside it never reach ff), so a push refused by its refs is refused
	// before its pack is read. The objects then decide the rest (Objects).
	prefix := g.Policy.Prefix()
	d := g.Policy.Decide(req, func(ref, _, _ string) bool { return strings.HasPrefix(ref, prefix) })
	ev := GitEvent{Service: svc, Repo: repo, Remote: s.authority + repo, ChangeID: changes.NewID(), Commands: req.Commands}
	var spool *os.File
	var od objDecision
	if d.Allow && g.Objects != nil {
		var unpackErr string
		spool, od, unpackErr = s.inspectPush(w, r, rc, rec.buf, req, repo)
		if spool != nil {
			defer func() {
				if spool != nil {
					spool.Close()
				}
			}()
		}
		if unpackErr != "" {
			ev.Err = errors.New(unpackErr)
			s.recordGit(ev)
			s.answerReport(w, req, gitgate.Report{UnpackErr: unpackErr}, unpackErr)
			return false
		}
		d = od.d
		ev.Objects, ev.Hits = true, od.hits
		if d.Allow && g.Objects.Reported != nil {
			// Reported once the remote has answered the push: the report is not on its
			// path, nor competing with it for the CPU.
			ev.ReportsLater = true
			ex.after = func() { s.reportLater(ev.ChangeID, od) }
		} else {
			ev.Reports, ev.ReportErr = s.reports(r.Context(), od)
		}
	}
	ev.Decision = d
	if !d.Allow && od.holdable && g.Objects.Hold != nil {
		if s.hold(w, r, req, spool, od.size, ev) {
			return false
		}
	}
	s.recordGit(ev)
	if d.Allow {
		_ = rc.SetReadDeadline(time.Time{})
		if spool != nil {
			// The bytes as the sandbox sent them (framing and encoding included).
			r.Body, spool = spool, nil
			return true
		}
		r.Body = readCloser{io.MultiReader(bytes.NewReader(rec.buf), r.Body), r.Body}
		return true
	}
	s.log.Info("git gate: push refused", "host", s.host, "repo", repo, "refused", len(d.Refused()))
	if spool == nil {
		// Take the rest of the body, so git reads the report rather than a reset.
		maxDrain := g.MaxDrain
		if maxDrain <= 0 {
			maxDrain = defaultGitMaxDrain
		}
		_ = rc.SetReadDeadline(time.Now().Add(timeout))
		if n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain+1)); n > maxDrain {
			w.Header().Set("Connection", "close")
		}
	}
	s.answerReport(w, req, gitgate.RefusalReport(d), d.Refused()[0].Command.Ref+": "+d.Refused()[0].Reason)
	return false
}

// reportLater computes an allowed push's reports in the background and hands them to
// GitObjects.Reported.
func (s *session) reportLater(id string, od objDecision) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		reports, reportErr := s.reports(ctx, od)
		s.git.Objects.Reported(id, reports, reportErr)
	}()
}

// hold keeps a push refused only for its protected paths for a person to decide
// (GitObjects.Hold) and answers git with a report naming the change: git exits non-zero
// at once, with "moat: held for approval as ch-…: PATH" in its output. It returns false,
// having answered nothing, when the push could not be kept (it is then refused).
func (s *session) hold(w http.ResponseWriter, r *http.Request, req *gitgate.Request, spool *os.File, size int64, ev GitEvent) bool {
	ev.Held = true
	hp := HeldPush{Event: ev, Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: http.Header{}, Body: spool, Size: size}
	for _, k := range changes.KeptHeaders() {
		if v := r.Header.Values(k); len(v) > 0 {
			hp.Header[http.CanonicalHeaderKey(k)] = slices.Clone(v)
		}
	}
	if err := s.git.Objects.Hold(r.Context(), hp); err != nil {
		s.log.Warn("git gate: could not hold a push for approval; refusing it", "host", s.host, "repo", ev.Repo, "change", ev.ChangeID, "err", err)
		return false
	}
	s.recordGit(ev)
	s.log.Info("git gate: push held for approval", "host", s.host, "repo", ev.Repo, "change", ev.ChangeID)
	rep := HeldReport(ev.ChangeID, ev.Decision, ev.Hits)
	s.answerReport(w, req, rep, rep.Messages[0])
	return true
}

// HeldReport is the report for a push held as change id: "ng" for each ref, with "moat:
// held for approval as ID" and the first protected path of the ref (refs refused only for
// the others' sake say so too), and messages naming the change, the paths and how a
// person decides it.
func HeldReport(id string, d gitgate.Decision, hits map[string][]gitgate.Hit) gitgate.Report {
	var rep gitgate.Report
	for _, v := range d.Verdicts {
		why := "moat: held for approval as " + id
		if h := hits[v.Command.Ref]; len(h) > 0 {
			why += ": " + h[0].Path
		}
		rep.Results = append(rep.Results, gitgate.RefResult{Ref: v.Command.Ref, Err: why})
	}
	for _, v := range d.Verdicts {
		for _, h := range hits[v.Command.Ref] {
			rep.Messages = append(rep.Messages, "moat: held for approval as "+id+": "+h.Path)
			if len(rep.Messages) >= 10 {
				break
			}
		}
	}
	if len(rep.Messages) == 0 {
		rep.Messages = append(rep.Messages, "moat: held for approval as "+id)
	}
	rep.Messages = append(rep.Messages, "moat: the push touches protected paths; nothing reached the remote yet. A person decides with `moat change approve "+id+"` or `moat change deny "+id+"`")
	return rep
}

// answerReport answers a refused push with rep, as git reads it; a client that asked
// for no report gets 403 with why.
func (s *session) answerReport(w http.ResponseWriter, req *gitgate.Request, rep gitgate.Report, why string) {
	if !gitgate.CanReport(req.Capabilities) {
		http.Error(w, "moat: git gate: "+why, http.StatusForbidden)
		return
	}
	var b bytes.Buffer
	if err := gitgate.WriteReport(&b, req.Capabilities, rep); err != nil {
		http.Error(w, "moat: git gate: "+clientReason(err), http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", gitgate.ContentTypeResult)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// readPush reads a push's commands from body: its Content-Encoding undone, at most
// maxHead decoded bytes. probe is git's "0000" request (sent before a large push to
// check the credentials), which has no commands and is let through.
func readPush(body io.Reader, encoding string, maxHead int64) (req *gitgate.Request, probe bool, err error) {
	dec, err := gitgate.DecodeBody(body, encoding, maxHead)
	if err != nil {
		return nil, false, err
	}
	br := bufio.NewReader(dec)
	if b, err := br.Peek(5); len(b) == 4 && string(b) == "0000" && errors.Is(err, io.EOF) {
		return nil, true, nil
	}
	req, err = gitgate.ParseReceivePack(br, gitgate.Limits{})
	return req, false, err
}

// clientReason is err's text for the sandbox: one line of printable ASCII.
func clientReason(err error) string {
	msg := err.Error()
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		msg = "could not read the request: " + msg
	}
	b := []byte(msg)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			b[i] = '?'
		}
	}
	if len(b) > 512 {
		b = b[:512]
	}
	return string(b)
}

func (s *session) recordGit(ev GitEvent) {
	if s.git.Record != nil {
		s.git.Record(ev)
	}
}

// recorder keeps every byte read through it, up to max (past it, reads fail): the part
// of a push's body the gate read, to be sent again in front of the rest.
type recorder struct {
	r   io.Reader
	buf []byte
	max int
}

func (c *recorder) Read(p []byte) (int, error) {
	if len(c.buf) >= c.max {
		return 0, fmt.Errorf("more than %d bytes of the body before the pack: %w", c.max, errdefs.ErrInvalidArgument)
	}
	if len(p) > c.max-len(c.buf) {
		p = p[:c.max-len(c.buf)]
	}
	n, err := c.r.Read(p)
	c.buf = append(c.buf, p[:n]...)
	return n, err
}

// filterAdvertisement makes res's body the receive-pack advertisement without the
// capabilities moat refuses. body is res's body, decoded. An answer that is not an
// advertisement is an error (502): git would take it for the dumb protocol.
func filterAdvertisement(res *http.Response, body io.Reader) (io.ReadCloser, error) {
	ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	if ct != gitgate.ContentTypeAdvertisement {
		return nil, fmt.Errorf("a push advertisement of content type %q", truncateString(ct, 80))
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(gitgate.FilterAdvertisement(pw, body)) }()
	res.Header.Del("Content-Length")
	res.ContentLength = -1
	return advertBody{pr: pr, up: res.Body}, nil
}

// advertBody reads the filtered advertisement; Close ends the filter and the upstream
// body.
type advertBody struct {
	pr *io.PipeReader
	up io.Closer
}

func (b advertBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b advertBody) Close() error {
	b.pr.CloseWithError(errors.New("advertisement closed"))
	return b.up.Close()
}

func truncateString(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
