package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

// changeRecord is the change record of one push the git gate decided.
func changeRecord(sandbox string, ev intercept.GitEvent, now time.Time) changes.Record {
	r := changes.Record{ID: ev.ChangeID, Sandbox: sandbox, Kind: changes.KindPush, Remote: ev.Remote, Time: now.UTC()}
	if ev.Err != nil {
		// Not checkable (the objects could not be received, the remote not reached, …):
		// refused before any decision on its objects.
		r.Decision, r.Reasons = changes.Refused, []string{ev.Err.Error()}
		for _, c := range ev.Commands {
			r.Refs = append(r.Refs, changes.Ref{Ref: c.Ref, Old: c.Old, New: c.New, Rule: "invalid"})
		}
		r.ReportError = "the push could not be checked"
		return r
	}
	changes.FromDecision(&r, ev.Decision, ev.Hits, ev.Held)
	for i := range r.Refs {
		r.Refs[i].Report = ev.Reports[r.Refs[i].Ref]
	}
	r.ReportError = ev.ReportErr
	if !ev.Objects {
		r.ReportError = "the ref rules refused the push before its objects were read"
	}
	return r
}

// addChange stores the change record of a push decided (not held: holdPush stored it).
func (m *Manager) addChange(sandbox string, ev intercept.GitEvent) {
	if m.changes == nil || ev.ChangeID == "" || ev.Held {
		return
	}
	if err := m.changes.Add(changeRecord(sandbox, ev, time.Now())); err != nil {
		m.log.Warn("git gate: storing a change record", "sandbox", sandbox, "change", ev.ChangeID, "err", err)
	}
}

// setReports adds the reports of an allowed push to its record.
func (m *Manager) setReports(sandbox, cid string, reports map[string]*safegit.ChangeReport, reportErr string) {
	if m.changes == nil {
		return
	}
	if err := m.changes.SetReports(sandbox, cid, reports, reportErr); err != nil {
		m.log.Warn("git gate: storing a change report", "sandbox", sandbox, "change", cid, "err", err)
	}
}

// holdPush keeps a push for a person to approve: its change record (held) and the
// request with its body as sent.
func (m *Manager) holdPush(sandbox string, p intercept.HeldPush) error {
	if m.changes == nil {
		return fmt.Errorf("no change store: %w", errdefs.ErrUnavailable)
	}
	r := changeRecord(sandbox, p.Event, time.Now())
	req := changes.HeldRequest{Method: p.Method, Path: p.Path, RawQuery: p.RawQuery, Header: p.Header}
	held, err := m.changes.Hold(r, req, p.Body, p.Size)
	if err == nil {
		m.hooks.held(held)
	}
	return err
}

// Changes lists sandbox id's change records, oldest first.
func (m *Manager) Changes(id string) ([]changes.Record, error) {
	if m.changes == nil {
		return []changes.Record{}, nil
	}
	return m.changes.List(id)
}

// Change returns one change record of sandbox id.
func (m *Manager) Change(id, cid string) (changes.Record, error) {
	if m.changes == nil {
		return changes.Record{}, fmt.Errorf("change %s: %w", cid, errdefs.ErrNotFound)
	}
	return m.changes.Get(id, cid)
}

// ChangePatch returns the patch of change cid's ref (ref "": the first ref with a
// report) from its report's base to its new commit, read from the sandbox's quarantine
// of the remote (bounded; see safegit.Quarantine.Patch).
func (m *Manager) ChangePatch(ctx context.Context, id, cid, ref string) (io.Reader, error) {
	r, err := m.Change(id, cid)
	if err != nil {
		return nil, err
	}
	for _, x := range r.Refs {
		if x.Report == nil || ref != "" && x.Ref != ref {
			continue
		}
		dir, err := safegit.Dir(m.cfg.GitDir, id, r.Remote)
		if err != nil {
			return nil, err
		}
		m.gitMu.Lock()
		q, err := safegit.Open(dir, safegit.Options{Logger: m.log.With("sandbox", id)})
		m.gitMu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("change %s: the quarantine of %s: %w", cid, r.Remote, err)
		}
		return q.Patch(ctx, x.Report.Base, x.Report.Tip)
	}
	if ref != "" {
		return nil, fmt.Errorf("change %s has no report for ref %q: %w", cid, ref, errdefs.ErrNotFound)
	}
	return nil, fmt.Errorf("change %s has no report (%s): %w", cid, r.ReportError, errdefs.ErrNotFound)
}

// DenyChange discards held change cid of sandbox id: its body is dropped, the record
// says who denied it and why. A change not held is errdefs.ErrConflict.
func (m *Manager) DenyChange(id, cid, by, reason string) (changes.Record, error) {
	if m.changes == nil {
		return changes.Record{}, fmt.Errorf("change %s: %w", cid, errdefs.ErrNotFound)
	}
	r, err := m.changes.Transition(id, cid, changes.ActDeny, func(r *changes.Record) {
		r.Decided = &changes.Decided{Action: changes.ActDeny, By: by, Time: time.Now().UTC(), Reason: reason}
	})
	if err != nil {
		return changes.Record{}, err
	}
	m.auditChange(r)
	m.hooks.decided(r)
	return r, nil
}

// ApproveChange applies held change cid of sandbox id: the push is sent again, exactly as
// the sandbox sent it (method, path, body and its headers), through the sandbox's own
// interceptor for the remote, so the credential is injected as for the original push;
// the remote's report says whether it took it (approved) or not (apply-failed, with the
// remote's reason: the branch moved meanwhile, say). The sandbox must be running (its
// boundary holds its credentials and policy); otherwise the change stays held and the
// error is errdefs.ErrConflict. Deciding a change twice is errdefs.ErrConflict.
func (m *Manager) ApproveChange(ctx context.Context, id, cid, by, reason string) (changes.Record, error) {
	if m.changes == nil {
		return changes.Record{}, fmt.Errorf("change %s: %w", cid, errdefs.ErrNotFound)
	}
	now := time.Now().UTC()
	r, err := m.changes.Transition(id, cid, changes.ActApprove, func(r *changes.Record) {
		r.Decided = &changes.Decided{Action: changes.ActApprove, By: by, Time: now, Reason: reason}
	})
	if err != nil {
		return changes.Record{}, err
	}
	result, applyErr := m.apply(ctx, id, r)
	var notRunning *notRunningError
	if errors.As(applyErr, &notRunning) {
		// Nothing was sent: the change waits again.
		if _, err := m.changes.Transition(id, cid, changes.ActRelease, func(r *changes.Record) { r.Decided = nil }); err != nil {
			m.log.Warn("git gate: releasing a change", "sandbox", id, "change", cid, "err", err)
		}
		return changes.Record{}, fmt.Errorf("change %s: %w", cid, applyErr)
	}
	action := changes.ActApplied
	if applyErr != nil {
		action, result = changes.ActFailed, applyErr.Error()
	}
	r, err = m.changes.Transition(id, cid, action, func(r *changes.Record) {
		if r.Decided != nil {
			r.Decided.Result = result
		}
	})
	if err != nil {
		return changes.Record{}, err
	}
	m.auditChange(r)
	m.hooks.decided(r)
	return r, nil
}

// notRunningError: the sandbox's boundary is not attached; nothing was sent.
type notRunningError struct{ id string }

func (e *notRunningError) Error() string {
	return "sandbox " + e.id + " is not running: start it to apply the change (its boundary holds the credential and policy)"
}

func (e *notRunningError) Unwrap() error { return errdefs.ErrConflict }

// apply sends held change r again and reads the remote's report. It returns the
// remote's answer in one line; an error means the remote did not take it.
func (m *Manager) apply(ctx context.Context, id string, r changes.Record) (string, error) {
	m.mu.Lock()
	b := m.bs[id]
	m.mu.Unlock()
	if b == nil {
		return "", &notRunningError{id: id}
	}
	host, port, repo, err := splitRemote(r.Remote)
	if err != nil {
		return "", err
	}
	ic, ok := m.interceptorFor(b, b.creds, host, port).(interceptor)
	if !ok {
		return "", fmt.Errorf("the sandbox no longer has a credential binding or HTTP rule for %s:%d", host, port)
	}
	req, body, err := m.changes.OpenHeld(id, r.ID)
	if err != nil {
		return "", err
	}
	defer body.Close()
	if !strings.HasPrefix(req.Path, repo) {
		return "", fmt.Errorf("the held request's path %q is not under %q", req.Path, repo)
	}
	u := &url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(int(port))), RawQuery: req.RawQuery}
	if u.Path, err = url.PathUnescape(req.Path); err != nil {
		return "", err
	}
	u.RawPath = req.Path
	hr, err := http.NewRequestWithContext(ctx, req.Method, u.String(), body)
	if err != nil {
		return "", err
	}
	hr.Header = req.Header.Clone()
	if hr.Header == nil {
		hr.Header = http.Header{}
	}
	hr.ContentLength = req.Size
	hr.Body = io.NopCloser(io.LimitReader(body, req.Size))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	res, err := ic.replay(ctx, hr)
	if err != nil {
		return "", err
	}
	rep, err := readPushAnswer(res)
	ic.recordApply(r, rep, err)
	if err != nil {
		return "", err
	}
	if rep.Failed() {
		return "", errors.New(applyFailure(rep))
	}
	var oks []string
	for _, x := range rep.Results {
		oks = append(oks, "ok "+x.Ref)
	}
	return "the remote took the push: " + strings.Join(oks, ", "), nil
}

// readPushAnswer reads the remote's answer to a replayed push: its report-status, in
// side-band when the push asked for it.
func readPushAnswer(res intercept.ReplayResult) (gitgate.Report, error) {
	if res.Status != http.StatusOK {
		return gitgate.Report{}, fmt.Errorf("the remote answered %d: %s", res.Status, firstLine(res.Body))
	}
	if ct, _, _ := mime.ParseMediaType(res.ContentType); ct != gitgate.ContentTypeResult {
		return gitgate.Report{}, fmt.Errorf("the remote answered %q, not a push result: %s", ct, firstLine(res.Body))
	}
	// Whether the push asked for side-band is in its first command's capabilities; the
	// answer says it too: a side-band answer's first pkt-line starts with band 1 or 2.
	sideband := len(res.Body) > 4 && (res.Body[4] == 1 || res.Body[4] == 2)
	rep, err := gitgate.ParseReport(bytes.NewReader(res.Body), sideband)
	if err != nil {
		return gitgate.Report{}, fmt.Errorf("the remote's answer: %w", err)
	}
	return rep, nil
}

// applyFailure says in one line why the remote did not take a replayed push.
func applyFailure(rep gitgate.Report) string {
	var parts []string
	if rep.UnpackErr != "" {
		parts = append(parts, "unpack: "+rep.UnpackErr)
	}
	for _, x := range rep.Results {
		if x.Err != "" {
			why := x.Ref + ": " + x.Err
			if x.Err == "failed to lock" || strings.Contains(x.Err, "stale info") || strings.Contains(x.Err, "failed to update ref") || strings.Contains(x.Err, "fetch first") {
				why += " (the branch moved on the remote since the push was held; push again from the sandbox)"
			}
			parts = append(parts, why)
		}
	}
	out := "the remote refused the push: " + strings.Join(parts, "; ")
	for i, m := range rep.Messages {
		if i == 3 {
			break
		}
		out += " [remote: " + m + "]"
	}
	return out
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// splitRemote splits "host:port/path" into its host, port and path ("/path").
func splitRemote(remote string) (string, uint16, string, error) {
	hp, path, ok := strings.Cut(remote, "/")
	if !ok {
		return "", 0, "", fmt.Errorf("remote %q: no path", remote)
	}
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, "", fmt.Errorf("remote %q: %w", remote, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return "", 0, "", fmt.Errorf("remote %q: bad port", remote)
	}
	return host, uint16(port), "/" + path, nil
}

// auditChange records a person's decision on a held change (and its outcome) as a git
// audit event.
func (m *Manager) auditChange(r changes.Record) {
	if m.cfg.Audit == nil || r.Decided == nil {
		return
	}
	refs := make([]string, 0, len(r.Refs))
	for _, x := range r.Refs {
		refs = append(refs, x.Ref)
	}
	d := fmt.Sprintf("change %s to %s (%s): %s by %s", r.ID, r.Remote, strings.Join(refs, ", "), r.Decision, r.Decided.By)
	if r.Decided.Reason != "" {
		d += " (" + r.Decided.Reason + ")"
	}
	if r.Decided.Result != "" {
		d += ": " + r.Decided.Result
	}
	if len(d) > maxGitReason {
		d = d[:maxGitReason] + "..."
	}
	m.cfg.Audit(r.Sandbox, "git", d)
}
