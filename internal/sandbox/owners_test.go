package sandbox

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestMayUseMayManage: who may see and use a sandbox, and who may manage it, for every
// kind of caller against private, team (and legacy "") and warm sandboxes.
func TestMayUseMayManage(t *testing.T) {
	op := Caller{Operator: true}
	owner := Caller{APIKey: "key-a", Name: "alice"}
	other := Caller{APIKey: "key-b", Name: "bob"}
	admin := Caller{APIKey: "key-c", Admin: true}
	nobody := Caller{}
	adminNoKey := Caller{Admin: true} // no identity: the flag alone grants nothing
	private := &Sandbox{Owner: "key-a", Visibility: VisibilityPrivate}
	legacy := &Sandbox{Owner: "key-a"} // a record from before visibility: private
	team := &Sandbox{Owner: "key-a", Visibility: VisibilityTeam}
	opTeam := &Sandbox{Owner: "", Visibility: VisibilityTeam}
	opPrivate := &Sandbox{Owner: ""}
	warm := &Sandbox{Owner: "", Warm: true, Visibility: VisibilityTeam}
	for _, tc := range []struct {
		name        string
		c           Caller
		sb          *Sandbox
		use, manage bool
	}{
		{"operator private", op, private, true, true},
		{"operator warm", op, warm, true, true},
		{"owner private", owner, private, true, true},
		{"owner legacy", owner, legacy, true, true},
		{"owner team", owner, team, true, true},
		{"other private", other, private, false, false},
		{"other legacy", other, legacy, false, false},
		{"other team", other, team, true, false},
		{"other operator's team", other, opTeam, true, false},
		{"other operator's private", other, opPrivate, false, false},
		{"other warm", other, warm, false, false},
		{"admin private", admin, private, true, true},
		{"admin team", admin, team, true, true},
		{"admin operator's", admin, opPrivate, true, true},
		{"admin warm", admin, warm, false, false},
		{"nobody private", nobody, private, false, false},
		{"nobody team", nobody, team, false, false},
		{"nobody operator's", nobody, opPrivate, false, false},
		{"admin without key", adminNoKey, private, false, false},
		{"admin without key team", adminNoKey, team, false, false},
	} {
		if got := tc.c.MayUse(tc.sb); got != tc.use {
			t.Errorf("%s: MayUse = %v, want %v", tc.name, got, tc.use)
		}
		if got := tc.c.MayManage(tc.sb); got != tc.manage {
			t.Errorf("%s: MayManage = %v, want %v", tc.name, got, tc.manage)
		}
	}
}

func TestCheckOwnerName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"", true},
		{"alice", true},
		{"Alice Smith", true},
		{"ci-bot@build.example", true},
		{"Zoë (café) 株式会社", true},
		{strings.Repeat("a", MaxOwnerName), true},
		{strings.Repeat("a", MaxOwnerName+1), false},
		{strings.Repeat("é", MaxOwnerName/2+1), false}, // bytes, not characters
		{" alice", false},
		{"alice ", false},
		{"ali\tce", false},
		{"ali\nce", false},
		{"alice\x00", false},
		{"\x1b[31mred", false},
		{"al\u202eice", false}, // right-to-left override
		{"al\u200bice", false}, // zero-width space
		{"al\u00a0ice", false}, // no-break space
		{"al\u2028ice", false}, // line separator
		{"\xff\xfe", false},
		{"a\x7fb", false},
	} {
		err := CheckOwnerName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckOwnerName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("CheckOwnerName(%q): %v is not invalid argument", tc.name, err)
		}
	}
}

func TestCheckVisibility(t *testing.T) {
	for in, want := range map[string]string{"": VisibilityPrivate, "private": VisibilityPrivate, "team": VisibilityTeam, "Team": "", "public": "", " team": ""} {
		got, err := CheckVisibility(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("CheckVisibility(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// FuzzCheckOwnerName: an accepted name is bounded, valid UTF-8, and has no control,
// format or non-space whitespace character, and no space at its ends.
func FuzzCheckOwnerName(f *testing.F) {
	for _, s := range []string{"alice", "", " a", "a\x1b", "al\u202eice", "株式会社", strings.Repeat("x", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if CheckOwnerName(name) != nil {
			return
		}
		if len(name) > MaxOwnerName || !utf8.ValidString(name) || strings.HasPrefix(name, " ") || strings.HasSuffix(name, " ") {
			t.Fatalf("accepted %q", name)
		}
		for _, r := range name {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || (unicode.IsSpace(r) && r != ' ') || !unicode.IsPrint(r) && r != ' ' {
				t.Fatalf("accepted %q with %U", name, r)
			}
		}
	})
}
