package changes

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

func TestTransition(t *testing.T) {
	states := []string{Allowed, Refused, Held, Applying, Approved, ApplyFailed, Denied, Expired}
	actions := []string{ActApprove, ActRelease, ActApplied, ActFailed, ActDeny, ActExpire}
	ok := map[[2]string]string{
		{Held, ActApprove}:     Applying,
		{Held, ActDeny}:        Denied,
		{Held, ActExpire}:      Expired,
		{Applying, ActRelease}: Held,
		{Applying, ActApplied}: Approved,
		{Applying, ActFailed}:  ApplyFailed,
	}
	for _, from := range states {
		for _, a := range actions {
			to, err := Transition(from, a)
			want, allowed := ok[[2]string{from, a}]
			switch {
			case allowed && (err != nil || to != want):
				t.Errorf("%s + %s = %q, %v; want %s", from, a, to, err, want)
			case !allowed && (err == nil || !errors.Is(err, errdefs.ErrConflict)):
				t.Errorf("%s + %s = %q, %v; want a conflict", from, a, to, err)
			}
		}
	}
	// Deciding twice says what happened.
	if _, err := Transition(Denied, ActApprove); err == nil || !strings.Contains(err.Error(), "already denied") {
		t.Errorf("approve after deny: %v", err)
	}
}

const (
	zero = "0000000000000000000000000000000000000000"
	a1   = "1111111111111111111111111111111111111111"
	a2   = "2222222222222222222222222222222222222222"
)

func TestFromDecision(t *testing.T) {
	pol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: "refs/heads/agent/x/"})
	if err != nil {
		t.Fatal(err)
	}
	ffAll := func(string, string, string) bool { return true }
	ffNone := func(string, string, string) bool { return false }
	wf := map[string][]gitgate.Hit{"refs/heads/agent/x/w": {{Path: ".github/workflows/ci.yml", Glob: ".github/workflows/**"}}}
	for _, tc := range []struct {
		name     string
		cmds     []gitgate.Command
		ff       gitgate.FastForward
		hits     map[string][]gitgate.Hit
		hold     bool
		holdable bool
		decision string
		reason   string
	}{
		{name: "allowed", cmds: []gitgate.Command{{Old: zero, New: a1, Ref: "refs/heads/agent/x/w"}}, ff: ffAll, decision: Allowed},
		{name: "outside", cmds: []gitgate.Command{{Old: zero, New: a1, Ref: "refs/heads/main"}}, ff: ffAll, hold: true, decision: Refused, reason: "refs/heads/main: this sandbox may push only"},
		{name: "protected refused", cmds: []gitgate.Command{{Old: a1, New: a2, Ref: "refs/heads/agent/x/w"}}, ff: ffAll, hits: wf, holdable: true, decision: Refused, reason: `touches protected path ".github/workflows/ci.yml"`},
		{name: "protected held", cmds: []gitgate.Command{{Old: a1, New: a2, Ref: "refs/heads/agent/x/w"}}, ff: ffAll, hits: wf, hold: true, holdable: true, decision: Held, reason: `touches protected path ".github/workflows/ci.yml"`},
		{name: "protected and non-ff", cmds: []gitgate.Command{{Old: a1, New: a2, Ref: "refs/heads/agent/x/w"}}, ff: ffNone, hits: wf, hold: true, decision: Refused, reason: "non-fast-forward"},
		{name: "protected and a bad ref", cmds: []gitgate.Command{{Old: a1, New: a2, Ref: "refs/heads/agent/x/w"}, {Old: zero, New: a1, Ref: "refs/tags/v1"}}, ff: ffAll, hits: wf, hold: true, decision: Refused, reason: "pushing tags"},
		{name: "protected and a clean ref", cmds: []gitgate.Command{{Old: a1, New: a2, Ref: "refs/heads/agent/x/w"}, {Old: zero, New: a1, Ref: "refs/heads/agent/x/y"}}, ff: ffAll, hits: wf, hold: true, holdable: true, decision: Held, reason: "protected path"},
	} {
		req := &gitgate.Request{Commands: tc.cmds}
		d := pol.Decide(req, tc.ff)
		dp := gitgate.WithProtected(d, tc.hits)
		if got := Holdable(d, dp); got != tc.holdable {
			t.Errorf("%s: Holdable = %v", tc.name, got)
		}
		var r Record
		FromDecision(&r, dp, tc.hits, tc.hold && Holdable(d, dp))
		if r.Decision != tc.decision {
			t.Errorf("%s: decision %s, want %s", tc.name, r.Decision, tc.decision)
		}
		if len(r.Refs) != len(tc.cmds) || r.Refs[0].Ref != tc.cmds[0].Ref || r.Refs[0].Old != tc.cmds[0].Old || r.Refs[0].New != tc.cmds[0].New {
			t.Errorf("%s: refs %+v", tc.name, r.Refs)
		}
		if tc.reason != "" && (len(r.Reasons) == 0 || !strings.Contains(strings.Join(r.Reasons, "\n"), tc.reason)) {
			t.Errorf("%s: reasons %q, want %q", tc.name, r.Reasons, tc.reason)
		}
		if tc.reason == "" && len(r.Reasons) > 0 {
			t.Errorf("%s: reasons %q", tc.name, r.Reasons)
		}
		if n := len(tc.hits["refs/heads/agent/x/w"]); len(r.Protected) != n && tc.name != "outside" {
			t.Errorf("%s: protected %+v", tc.name, r.Protected)
		}
	}
}

func TestBound(t *testing.T) {
	rep := &safegit.ChangeReport{Commits: []safegit.Commit{{Subject: strings.Repeat("é", 2000)}}}
	for i := range 1500 {
		rep.Files = append(rep.Files, safegit.FileChange{Path: "f" + strings.Repeat("x", i%10), Added: 2, Removed: 1})
	}
	r := Record{Refs: []Ref{{Ref: "refs/heads/a", Report: rep}}, Reasons: []string{strings.Repeat("r", 5000)}}
	Bound(&r)
	ref := r.Refs[0]
	if ref.Files != 1500 || ref.Added != 3000 || ref.Removed != 1500 {
		t.Errorf("totals %d +%d -%d", ref.Files, ref.Added, ref.Removed)
	}
	if len(ref.Report.Files) != maxFilesKept || !ref.Report.FilesTruncated {
		t.Errorf("files kept: %d", len(ref.Report.Files))
	}
	if s := ref.Report.Commits[0].Subject; len(s) > maxString || !strings.HasSuffix(s, "é") {
		t.Errorf("subject cut to %d bytes, or in a UTF-8 sequence", len(s))
	}
	if len(r.Reasons[0]) != maxString {
		t.Errorf("reason %d bytes", len(r.Reasons[0]))
	}
	if files, added, removed := r.Totals(); files != 1500 || added != 3000 || removed != 1500 {
		t.Errorf("Totals %d %d %d", files, added, removed)
	}
}

func TestStore(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewStore(root, Options{MaxRecords: 3, MaxHeld: 2, MaxHeldBytes: 10, HoldFor: time.Hour, Now: func() time.Time { return now }})
	rec := func(d string) Record {
		now = now.Add(time.Second)
		return Record{ID: NewID(), Sandbox: "sb1", Kind: KindPush, Time: now, Decision: d, Refs: []Ref{{Ref: "refs/heads/a"}}}
	}
	if list, err := s.List("sb1"); err != nil || len(list) != 0 {
		t.Fatalf("empty list: %v %v", list, err)
	}
	first := rec(Allowed)
	if err := s.Add(first); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(first); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("same id twice: %v", err)
	}
	// Reports computed after the push went on its way.
	rep := &safegit.ChangeReport{Tip: a1, Files: []safegit.FileChange{{Path: "x", Added: 7, Removed: 2}}}
	if err := s.SetReports("sb1", first.ID, map[string]*safegit.ChangeReport{"refs/heads/a": rep}, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get("sb1", first.ID); err != nil || r.Refs[0].Report == nil || r.Refs[0].Added != 7 || r.Refs[0].Removed != 2 || r.Refs[0].Files != 1 {
		t.Errorf("after SetReports: %+v %v", r, err)
	}
	if err := s.SetReports("sb1", "ch-00000000", nil, ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetReports of a missing record: %v", err)
	}
	held, err := s.Hold(rec(""), HeldRequest{Method: "POST", Path: "/r.git/git-receive-pack"}, strings.NewReader("BODY"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if held.Decision != Held || held.Expires == nil || !held.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("held record %+v", held)
	}
	st, err := os.Stat(filepath.Join(root, "sb1", "changes", held.ID+".body"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("held body: %v %v", st, err)
	}
	if st, _ := os.Stat(filepath.Join(root, "sb1", "changes")); st.Mode().Perm() != 0o700 {
		t.Errorf("changes dir mode %v", st.Mode())
	}
	req, f, err := s.OpenHeld("sb1", held.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "BODY" || req.Size != 4 || req.Method != "POST" {
		t.Errorf("held request %+v %q", req, b)
	}
	// Over the bytes bound (4 waiting + 7 > 10): refused, nothing kept.
	big := rec("")
	if _, err := s.Hold(big, HeldRequest{}, strings.NewReader("1234567"), 7); !errors.Is(err, errdefs.ErrResourceExhausted) || s.HasHeld("sb1", big.ID) {
		t.Errorf("held bytes bound: %v", err)
	}
	if _, err := s.Get("sb1", big.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused hold left a record: %v", err)
	}
	// A second held change, then the bound of waiting ones.
	held2, err := s.Hold(rec(""), HeldRequest{}, strings.NewReader("B2"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hold(rec(""), HeldRequest{}, strings.NewReader("B3"), 2); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("third held change: %v", err)
	}
	// Pruning keeps the held ones: at 5 records (max 3, and a tenth, at least 1, more
	// between prunings) the two oldest decided go.
	if err := s.Add(rec(Refused)); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List("sb1"); len(list) != 4 {
		t.Errorf("4 records, pruned already: %d", len(list))
	}
	last := rec(Allowed)
	if err := s.Add(last); err != nil {
		t.Fatal(err)
	}
	list, _ := s.List("sb1")
	if len(list) != 3 || list[0].ID != held.ID || list[1].ID != held2.ID || list[2].ID != last.ID {
		t.Errorf("after pruning: %d records: %+v", len(list), list)
	}
	if _, err := s.Get("sb1", first.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pruned record: %v", err)
	}

	// approve → applying → approved; the body goes; deciding again is a conflict.
	r, err := s.Transition("sb1", held.ID, ActApprove, func(r *Record) { r.Decided = &Decided{Action: ActApprove, By: "operator"} })
	if err != nil || r.Decision != Applying || !s.HasHeld("sb1", held.ID) {
		t.Fatalf("approve: %+v %v", r, err)
	}
	if _, err := s.Transition("sb1", held.ID, ActDeny, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("deny while applying: %v", err)
	}
	if r, err = s.Transition("sb1", held.ID, ActApplied, nil); err != nil || r.Decision != Approved || s.HasHeld("sb1", held.ID) {
		t.Fatalf("applied: %+v %v", r, err)
	}
	if _, err := s.Transition("sb1", held.ID, ActApprove, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("approve twice: %v", err)
	}
	// Expiry: an hour later the other held change is expired and its body gone.
	now = now.Add(2 * time.Hour)
	if r, err = s.Get("sb1", held2.ID); err != nil || r.Decision != Expired || s.HasHeld("sb1", held2.ID) {
		t.Errorf("expired: %+v %v", r, err)
	}
	if _, err := s.Transition("sb1", held2.ID, ActApprove, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("approve expired: %v", err)
	}
	// A daemon that stopped mid-apply.
	h3, err := s.Hold(rec(""), HeldRequest{}, strings.NewReader("B3"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition("sb1", h3.ID, ActApprove, nil); err != nil {
		t.Fatal(err)
	}
	NewStore(root, Options{}).Recover()
	if r, err = s.Get("sb1", h3.ID); err != nil || r.Decision != ApplyFailed || !strings.Contains(r.Decided.Result, "daemon stopped") || s.HasHeld("sb1", h3.ID) {
		t.Errorf("recovered: %+v %v", r, err)
	}
	// Bad ids never reach the file system.
	for _, id := range []string{"../x", "ch-1234567", "ch-ABCDEF01", "ch-12345678/.."} {
		if _, err := s.Get("sb1", id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q): %v", id, err)
		}
	}
	for _, sb := range []string{"", "..", "a/b"} {
		if _, err := s.List(sb); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("List(%q): %v", sb, err)
		}
	}
}
