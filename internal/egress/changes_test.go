package egress

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

func TestSplitRemote(t *testing.T) {
	for in, want := range map[string][3]string{
		"git.test:443/o/r.git":  {"git.test", "443", "/o/r.git"},
		"[::1]:8443/git/r.git":  {"::1", "8443", "/git/r.git"},
		"github.com:443/a/b/c":  {"github.com", "443", "/a/b/c"},
		"git.test/o/r.git":      {},
		"git.test:0/o/r.git":    {},
		"git.test:99999/o/r":    {},
		"git.test:443":          {},
		"git.test:https/o/r.gi": {},
	} {
		host, port, path, err := splitRemote(in)
		if want[0] == "" {
			if err == nil {
				t.Errorf("%q: no error", in)
			}
			continue
		}
		if err != nil || host != want[0] || path != want[2] || strings.TrimSpace(want[1]) != itoa(port) {
			t.Errorf("%q: %q %d %q %v", in, host, port, path, err)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func TestReadPushAnswer(t *testing.T) {
	ok := gitgate.Report{Results: []gitgate.RefResult{{Ref: "refs/heads/agent/x/w"}}}
	moved := gitgate.Report{Results: []gitgate.RefResult{{Ref: "refs/heads/agent/x/w", Err: "failed to update ref"}}}
	for _, caps := range []gitgate.Capabilities{{"report-status"}, {"report-status", "side-band-64k"}} {
		for _, rep := range []gitgate.Report{ok, moved} {
			var b bytes.Buffer
			if err := gitgate.WriteReport(&b, caps, rep); err != nil {
				t.Fatal(err)
			}
			got, err := readPushAnswer(intercept.ReplayResult{Status: 200, ContentType: gitgate.ContentTypeResult, Body: b.Bytes()})
			if err != nil || got.Failed() != rep.Failed() || got.Results[0].Ref != "refs/heads/agent/x/w" {
				t.Errorf("%v %+v: %+v %v", caps, rep, got, err)
			}
		}
	}
	if why := applyFailure(moved); !strings.Contains(why, "the branch moved on the remote") || !strings.Contains(why, "refs/heads/agent/x/w: failed to update ref") {
		t.Errorf("applyFailure: %s", why)
	}
	for _, res := range []intercept.ReplayResult{
		{Status: 403, ContentType: "text/plain", Body: []byte("moat: blocked by the egress policy\n\x1b[31m")},
		{Status: 200, ContentType: "text/html", Body: []byte("<html>")},
		{Status: 200, ContentType: gitgate.ContentTypeResult, Body: []byte("garbage")},
	} {
		if _, err := readPushAnswer(res); err == nil || strings.ContainsRune(err.Error(), 0x1b) {
			t.Errorf("%+v: %v", res, err)
		}
	}
}

func TestChangeRecord(t *testing.T) {
	pol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: "refs/heads/agent/x/"})
	if err != nil {
		t.Fatal(err)
	}
	const zero, a1, a2 = "0000000000000000000000000000000000000000", "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	now := time.Now()
	cmds := []gitgate.Command{{Old: zero, New: a1, Ref: "refs/heads/agent/x/w"}}
	rep := &safegit.ChangeReport{Base: a2, Tip: a1, Files: []safegit.FileChange{{Path: "a", Added: 3, Removed: 1}}}
	ev := intercept.GitEvent{ChangeID: "ch-12345678", Remote: "h:443/r.git", Commands: cmds, Objects: true,
		Decision: pol.Decide(&gitgate.Request{Commands: cmds}, nil), Reports: map[string]*safegit.ChangeReport{"refs/heads/agent/x/w": rep}}
	r := changeRecord("sb", ev, now)
	changes.Bound(&r)
	if r.Decision != changes.Allowed || r.Refs[0].Report != rep || r.Refs[0].Added != 3 || r.Refs[0].Removed != 1 || r.Refs[0].Files != 1 || r.ReportError != "" || r.Kind != changes.KindPush || r.Remote != "h:443/r.git" {
		t.Errorf("allowed: %+v", r)
	}
	ev.Objects, ev.Reports = false, nil
	ev.Decision = pol.Decide(&gitgate.Request{Commands: []gitgate.Command{{Old: zero, New: a1, Ref: "refs/heads/main"}}}, nil)
	if r := changeRecord("sb", ev, now); r.Decision != changes.Refused || r.ReportError == "" || len(r.Reasons) != 1 {
		t.Errorf("refused by refs: %+v", r)
	}
	ev.Err = errors.New("moat: could not fetch")
	if r := changeRecord("sb", ev, now); r.Decision != changes.Refused || r.Reasons[0] != "moat: could not fetch" || len(r.Refs) != 1 || r.Refs[0].Rule != "invalid" {
		t.Errorf("not checkable: %+v", r)
	}
}
