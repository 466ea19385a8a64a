package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/store"
)

// Escape sequences a sandbox might plant: a window title (OSC, BEL-terminated), a screen
// clear (CSI), the 8-bit CSI, a bidirectional override and a hyperlink.
const (
	oscTitle = "\x1b]0;pwned\x07"
	clear    = "\x1b[2J"
)

func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"plain.example:443 (dns)":    "plain.example:443 (dns)",
		"é ü 日本 😀 ×3":                "é ü 日本 😀 ×3",
		oscTitle + "x":               `\x1b]0;pwned\x07x`,
		clear:                        `\x1b[2J`,
		"a\tb\nc\rd\x08e\x00":        `a\tb\nc\rd\x08e\x00`,
		"del\x7f":                    `del\x7f`,
		"\u009b31mred":               `\u009b31mred`,
		"\u202egnp.exe":              `\u202egnp.exe`,
		"zero\u200bwidth\ufeff":      `zero\u200bwidth\ufeff`,
		"nb\u00a0sp":                 `nb\u00a0sp`,
		"tag\U000E0041":              `tag\U000e0041`,
		"bad\xff\xc3":                `bad\xff\xc3`,
		`back\slash`:                 `back\\slash`,
		"\x1b]8;;http://x\x1b\\link": `\x1b]8;;http://x\x1b\\link`,
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzTermSafe: the output holds printable runes only (no byte below 0x20, no DEL, no C1
// or other non-printable rune, valid UTF-8) and reads back, as a Go string literal, to the
// input.
func FuzzTermSafe(f *testing.F) {
	for _, s := range []string{oscTitle, clear, "\u009b", "\u202e", "a\\b", "\xff", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := termSafe(s)
		if !utf8.ValidString(out) {
			t.Fatalf("termSafe(%q) = %q: not UTF-8", s, out)
		}
		for _, r := range out {
			if !strconv.IsPrint(r) {
				t.Fatalf("termSafe(%q) = %q holds %U", s, out, r)
			}
		}
		back, err := strconv.Unquote(`"` + strings.ReplaceAll(out, `"`, `\"`) + `"`)
		if err != nil || back != s {
			t.Fatalf("termSafe(%q) = %q reads back as %q, %v", s, out, back, err)
		}
	})
}

// FuzzJSONSafe: jsonSafe keeps the value and leaves only printable runes and JSON's own
// whitespace.
func FuzzJSONSafe(f *testing.F) {
	for _, s := range []string{oscTitle, clear, "\u009b", "\u202e", "\x7f", "\U000E0041", "日本 \"q\" <&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := map[string][]string{s: {s, "x" + s}}
		js, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		out := jsonSafe(js)
		for _, r := range string(out) {
			if !strconv.IsPrint(r) && r != '\n' {
				t.Fatalf("jsonSafe of %q holds %U: %s", s, r, out)
			}
		}
		var want, got map[string][]string
		if err := json.Unmarshal(js, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("jsonSafe of %q is not JSON: %v\n%s", s, err, out)
		}
		if !equalJSON(want, got) {
			t.Fatalf("jsonSafe of %q changed the value: %q → %q", s, want, got)
		}
	})
}

func equalJSON(a, b map[string][]string) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestEgressFormattersInert: the egress table, the run summary and the lockfile report
// print a sandbox's names, reasons and paths with their escape sequences made inert.
func TestEgressFormattersInert(t *testing.T) {
	entries := []v1.EgressEntry{
		{Time: time.Now(), Phase: "run", Proto: "tcp", Name: oscTitle + "evil.test", Port: 443, Allowed: false, Reason: "refused " + clear},
		{Time: time.Now(), Phase: "run", Proto: "tcp", Name: "ok.test", Port: 443, Allowed: true, Rule: "ok.test", Error: "upstream said " + clear},
		{Time: time.Now(), Phase: "run", Proto: "dns", Addr: "\u009b2J", Allowed: false, Reason: "x"},
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, e := range entries {
		printEgressRow(tw, e)
	}
	tw.Flush()
	writeEgressSummary(&b, entries)
	b.WriteString(termSafe(strings.Join(diffChecksums(nil, map[string]string{oscTitle + "/package-lock.json": "1"}), ", ")))
	assertInert(t, b.Bytes())
	for _, want := range []string{`\x1b]0;pwned\x07evil.test:443`, `refused \x1b[2J`, `upstream said \x1b[2J`, `\u009b2J`, `\x1b]0;pwned\x07/package-lock.json (created)`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// assertInert fails the test if out holds an ESC, a BEL, a carriage return, DEL or an
// encoded C1 control.
func assertInert(t *testing.T, out []byte) {
	t.Helper()
	for _, bad := range []string{"\x1b", "\x07", "\r", "\x7f", "\u009b", "\u202e"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("output holds %q:\n%q", bad, out)
		}
	}
}

// TestCLITerminalInjection runs the real moat binary on a sandbox's hostile text: a
// lockfile path from the setup phase, egress entries with escape sequences, and an error
// message from moat-init quoting a path. Nothing it prints holds an escape character; the
// JSON output still carries the exact text.
func TestCLITerminalInjection(t *testing.T) {
	c := newCLI(t)
	// The lockfile report of a setup phase.
	script := `d="$(printf '\033]0;pwned\007')"; mkdir -p "$d" && echo 1 > "$d/package-lock.json"; ` +
		`e="$(printf '\033[2J')"; mkdir -p "$e" && echo 1 > "$e/go.sum"`
	out, errOut, code := c.run("", "run", "--keep", "--setup", script, "--", "true")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errOut)
	}
	assertInert(t, []byte(out+errOut))
	for _, want := range []string{`\x1b]0;pwned\x07/package-lock.json (created)`, `\x1b[2J/go.sum (created)`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the lockfile report lacks %q:\n%s", want, errOut)
		}
	}
	id := ""
	for _, line := range strings.Split(errOut, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "moat:" && f[1] == "sandbox" {
			id = f[2]
		}
	}
	if id == "" {
		t.Fatalf("no sandbox ID in %q", errOut)
	}
	defer c.run("", "rm", id)

	// Egress entries as the boundary records them, with text a sandbox chose.
	st, err := store.Open(filepath.Join(c.args[1], "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	name := oscTitle + "evil.test"
	err = st.WriteEgress(context.Background(), []*egress.Entry{
		{Time: time.Now(), Sandbox: id, Phase: "run", Proto: "tcp", Name: name, Port: 443, Reason: "blocked " + clear},
		{Time: time.Now(), Sandbox: id, Phase: "run", Proto: "tcp", Name: "ok.test", Port: 443, Allowed: true, Rule: "ok.test", Error: "reset " + clear},
	}, nil)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"egress", id}, {"egress", "--blocked", id}} {
		out, errOut, code := c.run("", args...)
		if code != 0 || !strings.Contains(out, `\x1b]0;pwned\x07evil.test:443`) || !strings.Contains(out, `blocked \x1b[2J`) {
			t.Errorf("%v: %d %q %s", args, code, out, errOut)
		}
		assertInert(t, []byte(out+errOut))
	}
	out, _, _ = c.run("", "egress", "--json", id)
	assertInert(t, []byte(out))
	var list []v1.EgressEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) < 2 || list[len(list)-2].Name != name {
		t.Errorf("egress --json does not carry the exact name: %v %s", err, out)
	}

	// An error quoting a path, from moat-init through the daemon.
	_, errOut, code = c.run("", "cp", id+":"+oscTitle+clear, filepath.Join(t.TempDir(), "x"))
	if code == 0 || !strings.Contains(errOut, `\x1b]0;pwned\x07\x1b[2J`) {
		t.Errorf("cp of a missing path: %d %q", code, errOut)
	}
	assertInert(t, []byte(errOut))
	if _, err := os.Stat(filepath.Join(c.args[1], "moat.db")); err != nil {
		t.Fatal(err)
	}
}
