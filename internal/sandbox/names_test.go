package sandbox

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"web", true},
		{"Web-1.dev_x", true},
		{"0abc", true},
		{strings.Repeat("a", MaxNameLen), true},
		{strings.Repeat("a", MaxNameLen+1), false},
		{"", false},
		{"-web", false},
		{".web", false},
		{"_web", false},
		{"web/1", false},
		{"web 1", false},
		{"wéb", false},
		{"web\n", false},
		{"sb-0123", false}, // reads as an ID
		{"SB-web", false},  // … whatever its case
		{"sb", true},       // not an ID's shape
		{"sbx-web", true},  // neither
		{"web..", true},    // dots are fine after the first
		{"a", true},
		{"a%2fb", false},
	} {
		err := CheckName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckName(%q): %v is not ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		k, v string
	}{
		{"team=infra", true, "team", "infra"},
		{"team=", true, "team", ""},
		{"team", true, "team", ""},
		{"moat.dev/owner=alice", true, "moat.dev/owner", "alice"},
		{"a.b-c_d=e.f-g_h", true, "a.b-c_d", "e.f-g_h"},
		{"x=" + strings.Repeat("v", 63), true, "x", strings.Repeat("v", 63)},
		{"x=" + strings.Repeat("v", 64), false, "", ""},
		{strings.Repeat("k", 63) + "=v", true, strings.Repeat("k", 63), "v"},
		{strings.Repeat("k", 64) + "=v", false, "", ""},
		{"=v", false, "", ""},
		{"-team=v", false, "", ""},
		{"team-=v", false, "", ""},
		{"team=-v", false, "", ""},
		{"team=v-", false, "", ""},
		{"team=a=b", false, "", ""},
		{"team=a b", false, "", ""},
		{"Moat.dev/x=v", false, "", ""}, // the prefix is a lower-case DNS subdomain
		{"/x=v", false, "", ""},
		{"a/b/c=v", false, "", ""},
		{"moat.dev/=v", false, "", ""},
		{"a..b/x=v", false, "", ""},
		{strings.Repeat("a", 254) + "/x=v", false, "", ""},
	} {
		k, v, err := ParseLabel(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (k != tc.k || v != tc.v)) {
			t.Errorf("ParseLabel(%q) = %q, %q, %v; want %q, %q ok=%v", tc.in, k, v, err, tc.k, tc.v, tc.ok)
		}
	}
	many := map[string]string{}
	for i := 0; i <= MaxLabels; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	if err := CheckLabels(many); err == nil {
		t.Errorf("CheckLabels took %d labels", len(many))
	}
}

func TestResolve(t *testing.T) {
	list := []*Sandbox{
		{ID: "sb-aaaa00000001", Name: "web"},
		{ID: "sb-aaaa00000002"},
		{ID: "sb-bbbb00000003", Name: "db"},
		{ID: "sb-cccc00000004", Name: "sb"},
		{ID: "sb-dddd00000005", Name: "dup", Owner: "key-1"},
		{ID: "sb-dddd00000006", Name: "dup", Owner: "key-2"},
		{ID: "sb-eeee00000007", Name: "bbbb"}, // a name that is also an ID prefix
	}
	for _, tc := range []struct {
		ref, want string
		class     error
		mention   []string
	}{
		{ref: "sb-aaaa00000002", want: "sb-aaaa00000002"},
		{ref: "web", want: "sb-aaaa00000001"},
		{ref: "sb-bbbb", want: "sb-bbbb00000003"},
		{ref: "bbbb", want: "sb-eeee00000007"}, // names come before prefixes
		{ref: "sb-bb", want: "sb-bbbb00000003"},
		{ref: "cccc", want: "sb-cccc00000004"}, // a bare hex prefix
		{ref: "sb", want: "sb-cccc00000004"},   // the name, not every ID
		{ref: "sb-aaaa", class: errdefs.ErrInvalidArgument, mention: []string{"sb-aaaa00000001 web", "sb-aaaa00000002"}},
		{ref: "aaaa0000000", class: errdefs.ErrInvalidArgument, mention: []string{"sb-aaaa00000001", "sb-aaaa00000002"}},
		{ref: "sb-", class: errdefs.ErrInvalidArgument},
		{ref: "dup", class: errdefs.ErrInvalidArgument, mention: []string{"sb-dddd00000005", "sb-dddd00000006"}},
		{ref: "nope", class: errdefs.ErrNotFound},
		{ref: "sb-ffff", class: errdefs.ErrNotFound},
		{ref: "", class: errdefs.ErrInvalidArgument},
		{ref: "WEB", class: errdefs.ErrNotFound}, // names are case-sensitive
	} {
		got, err := Resolve(list, tc.ref)
		if tc.class != nil {
			if !errors.Is(err, tc.class) {
				t.Errorf("Resolve(%q) = %v, %v; want %v", tc.ref, got, err, tc.class)
				continue
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Resolve(%q): %q does not name %q", tc.ref, err, m)
				}
			}
			continue
		}
		if err != nil || got.ID != tc.want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", tc.ref, got, err, tc.want)
		}
	}
	// A prefix resolves among the list it is given only: a caller's visible sandboxes.
	if _, err := Resolve(list[2:3], "sb-aaaa"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a prefix of sandboxes outside the list: %v", err)
	}
}

func TestFilters(t *testing.T) {
	list := []*Sandbox{
		{ID: "sb-1", Name: "web", State: StateRunning, Template: "debian", Labels: map[string]string{"team": "a", "env": "dev"}},
		{ID: "sb-2", State: StateStopped, Template: "host", Labels: map[string]string{"team": "b"}},
		{ID: "sb-3", State: StateStopped, Template: "debian", TemplateAlias: "base", Labels: map[string]string{"team": "a", "flag": ""}},
		{ID: "sb-4", State: StatePaused, Template: "host"},
	}
	for _, tc := range []struct {
		exprs []string
		want  string
	}{
		{nil, "sb-1 sb-2 sb-3 sb-4"},
		{[]string{"label=team=a"}, "sb-1 sb-3"},
		{[]string{"label=team"}, "sb-1 sb-2 sb-3"},
		{[]string{"label=team=a", "state=stopped"}, "sb-3"},
		{[]string{"label=team=a", "label=env=dev"}, "sb-1"},
		{[]string{"label=flag="}, "sb-3"},
		{[]string{"label=flag"}, "sb-3"},
		{[]string{"state=stopped", "state=running"}, ""},
		{[]string{"template=debian"}, "sb-1 sb-3"},
		{[]string{"template=base"}, "sb-3"},
		{[]string{"name=web"}, "sb-1"},
		{[]string{"name=nope"}, ""},
		{[]string{"state=paused"}, "sb-4"},
	} {
		f, err := ParseFilters(tc.exprs)
		if err != nil {
			t.Errorf("ParseFilters(%q): %v", tc.exprs, err)
			continue
		}
		var ids []string
		for _, sb := range f.Select(list) {
			ids = append(ids, sb.ID)
		}
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("filters %q selected %q, want %q", tc.exprs, got, tc.want)
		}
	}
	for _, bad := range []string{"", "label", "label=", "state=sleeping", "color=red", "name=sb-1", "label=-x=y", "label=x=y z", "name=", "=x"} {
		if _, err := ParseFilters([]string{bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseFilters(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

var validNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// FuzzCheckName checks that every accepted name is a plain, URL-path-safe word of at most
// MaxNameLen bytes that cannot read as an ID, and that the validator never panics.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"web", "sb-0123456789ab", "", "a/b", "..", strings.Repeat("x", 70), "x\x00y", "Ünïcode"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckName(name)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("CheckName(%q): %v not ErrInvalidArgument", name, err)
			}
			return
		}
		if !validNameRE.MatchString(name) || strings.HasPrefix(strings.ToLower(name), "sb-") || IsFullID(name) {
			t.Fatalf("CheckName accepted %q", name)
		}
	})
}

// FuzzParseFilters checks that the filter parser never panics, classes every refusal, and
// that an accepted label filter's key passes the label key check.
func FuzzParseFilters(f *testing.F) {
	for _, s := range []string{"label=a=b", "label=moat.dev/x", "state=running", "name=web", "template=debian", "label==", "x", "label=a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := ParseFilters([]string{expr})
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ParseFilters(%q): %v not ErrInvalidArgument", expr, err)
			}
			return
		}
		for _, c := range flt.Labels {
			if CheckLabelKey(c.Key) != nil || (c.Value != nil && CheckLabelValue(c.Key, *c.Value) != nil) {
				t.Fatalf("ParseFilters(%q) accepted label condition %+v", expr, c)
			}
		}
		flt.Match(&Sandbox{ID: "sb-1", Labels: map[string]string{"a": "b"}})
	})
}
