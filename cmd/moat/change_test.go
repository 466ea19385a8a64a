package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// hostile is what a sandbox could put in a commit subject, a path or a ref.
const hostile = "x\x1b]52;c;aGVsbG8=\x07\x1b[2J\r\nrm -rf"

func sampleChange() v1.Change {
	return v1.Change{
		ID: "ch-0123abcd", Sandbox: "sb-1", Kind: "push", Remote: "git.test:443/o/r.git", Time: time.Unix(1700000000, 0),
		Decision: "held", Reasons: []string{"refs/heads/agent/x/" + hostile + ": touches protected path"},
		Protected: []v1.ProtectedHit{{Ref: "refs/heads/agent/x/w", Path: ".github/workflows/" + hostile, Glob: ".github/workflows/**"}},
		Files:     2, Added: 5, Removed: 1,
		Refs: []v1.ChangeRef{{Ref: "refs/heads/agent/x/" + hostile, Old: strings.Repeat("0", 40), New: strings.Repeat("a", 40), Rule: "protected-path",
			Files: 2, Added: 5, Removed: 1,
			Report: &v1.ChangeReport{Base: strings.Repeat("b", 40), Tip: strings.Repeat("a", 40),
				Commits: []v1.ChangeCommit{{ID: strings.Repeat("a", 40), AuthorName: hostile, AuthorEmail: hostile, Subject: hostile}},
				Files:   []v1.ChangeFile{{Path: hostile, Added: 4, Removed: 1}, {Path: "package-lock.json", Added: 1, Lockfile: true}}}}},
		Decided: &v1.ChangeDecided{Action: "approve", By: "operator", Reason: hostile, Result: hostile},
	}
}

// TestChangePrintersEscape: every sandbox-supplied string reaches the terminal escaped.
func TestChangePrintersEscape(t *testing.T) {
	ch := sampleChange()
	var b bytes.Buffer
	if err := printChanges(&b, []v1.Change{ch}); err != nil {
		t.Fatal(err)
	}
	if err := printChange(&b, ch); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("raw control characters reached the output:\n%q", out)
	}
	for _, want := range []string{"ch-0123abcd", "held", "+5/-1", "package-lock.json  (lockfile)", `\x1b`, "0→aaaaaaaaaa", "base bbbbbbbbbb, 2 files, +5/-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestWritePatch(t *testing.T) {
	patch := "diff --git a/x b/x\n+" + hostile + "\n+last line without newline"
	var raw, tty bytes.Buffer
	if err := writePatch(&raw, strings.NewReader(patch), false); err != nil || raw.String() != patch {
		t.Errorf("to a pipe the patch must be byte for byte: %q %v", raw.String(), err)
	}
	if err := writePatch(&tty, strings.NewReader(patch), true); err != nil || strings.ContainsAny(tty.String(), "\x1b\x07\r") || !strings.HasSuffix(tty.String(), "without newline") || strings.Count(tty.String(), "\n") != 3 {
		t.Errorf("to a terminal: %q %v", tty.String(), err)
	}
}

// TestChangeSandboxLookup: without --sandbox the CLI finds the caller's sandbox that has
// the change; a change no sandbox has is a clear error.
func TestChangeSandboxLookup(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/sandboxes":
			_ = json.NewEncoder(w).Encode([]v1.Sandbox{{ID: "sb-a"}, {ID: "sb-b"}})
		case "/v1/sandboxes/sb-b/changes/ch-0123abcd":
			_ = json.NewEncoder(w).Encode(sampleChange())
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(v1.Error{Code: "not_found", Message: "no"})
		}
	}))
	defer srv.Close()
	a := &app{client: sdk.NewHTTP(srv.URL, "")}
	_, id, err := a.changeSandbox(context.Background(), "", "ch-0123abcd")
	if err != nil || id != "sb-b" {
		t.Errorf("lookup: %q %v", id, err)
	}
	if _, id, err := a.changeSandbox(context.Background(), "sb-x", "ch-0123abcd"); err != nil || id != "sb-x" {
		t.Errorf("--sandbox: %q %v", id, err)
	}
	if _, _, err := a.changeSandbox(context.Background(), "", "ch-ffffffff"); err == nil || !strings.Contains(err.Error(), "--sandbox") {
		t.Errorf("unknown change: %v", err)
	}
}

// TestCLIChanges runs the real binary (in-process daemon): create --git-hold is in the
// sandbox, a sandbox without pushes has no changes (table and JSON), a missing change and
// a bad change id are clear errors, and the change commands all take --json.
func TestCLIChanges(t *testing.T) {
	c := newCLI(t)
	out, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--git-hold", "--json")
	var sb v1.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.GitProtected != "hold" {
		t.Fatalf("create --git-hold: %d %q %s", code, out, errOut)
	}
	defer c.run("", "rm", sb.ID)
	if out, e, code := c.run("", "changes", sb.ID, "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("changes --json: %d %q %s", code, out, e)
	}
	if out, e, code := c.run("", "changes", sb.ID); code != 0 || !strings.HasPrefix(out, "CHANGE") {
		t.Errorf("changes: %d %q %s", code, out, e)
	}
	if _, e, code := c.run("", "change", "approve", "ch-00000000", "--sandbox", sb.ID, "--json"); code == 0 || !strings.Contains(e, "not found") {
		t.Errorf("approve a missing change: %d %s", code, e)
	}
	if _, e, code := c.run("", "change", "show", "ch-00000000"); code == 0 || !strings.Contains(e, "--sandbox") {
		t.Errorf("show a change no sandbox has: %d %s", code, e)
	}
	if _, e, code := c.run("", "change", "patch", "bad-id", "--sandbox", sb.ID); code == 0 || !strings.Contains(e, "change id") {
		t.Errorf("patch of a bad id: %d %s", code, e)
	}
	if out, e, code := c.run("", "inspect", sb.ID); code != 0 || !strings.Contains(out, `"git_protected": "hold"`) {
		t.Errorf("inspect: %d %s %s", code, out, e)
	}
}
