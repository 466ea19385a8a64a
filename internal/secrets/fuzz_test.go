package secrets

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// FuzzCheckName holds the hand-written name check to NameRule, and its accepted names to
// what an environment variable name needs. Seeds: testdata/fuzz/FuzzCheckName.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"A", "_", "GITHUB_TOKEN", "A1", "1A", "a", "", "A=B", "A\x00", strings.Repeat("Z", 64), strings.Repeat("Z", 65), "ÄB", "A\n"} {
		f.Add(s)
	}
	rule := regexp.MustCompile(NameRule)
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckName(name)
		want := rule.MatchString(name) // RE2: $ is the end of the text, even after a newline
		if (err == nil) != want {
			t.Fatalf("CheckName(%q) = %v, rule says valid=%v", name, err, want)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("CheckName(%q): %v is not an invalid argument", name, err)
			}
			return
		}
		if len(name) == 0 || len(name) > 64 || strings.ContainsAny(name, "=\x00") || name[0] >= '0' && name[0] <= '9' {
			t.Fatalf("CheckName accepts %q, not a portable environment variable name", name)
		}
	})
}

// FuzzScopeNormalize: Normalize accepts only scopes it leaves unchanged when applied again,
// whose JSON form (part of the sealed associated data) survives a round trip through the
// data file byte for byte, and whose hosts each normalize to themselves. Seeds:
// testdata/fuzz/FuzzScopeNormalize.
func FuzzScopeNormalize(f *testing.F) {
	f.Fuzz(func(t *testing.T, hosts, methods, prefix, repos string, plain bool, headers string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		sc, err := Scope{Hosts: split(hosts), Methods: split(methods), PathPrefix: prefix, PlainHTTP: plain, Repositories: split(repos), Headers: split(headers)}.Normalize()
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Normalize: %v is not an invalid argument", err)
			}
			return
		}
		again, err := sc.Normalize()
		if err != nil || !reflect.DeepEqual(again, sc) {
			t.Fatalf("Normalize(%+v) = %+v, %v: not a fixed point", sc, again, err)
		}
		j, _ := json.Marshal(sc)
		var back Scope
		if err := json.Unmarshal(j, &back); err != nil {
			t.Fatal(err)
		}
		if j2, _ := json.Marshal(back); string(j2) != string(j) {
			t.Fatalf("JSON round trip changed %s to %s", j, j2)
		}
		for _, h := range sc.Hosts {
			if n, err := NormalizeHost(h); err != nil || n != h || strings.ContainsAny(h, "/@ \\") {
				t.Fatalf("host %q normalizes to %q, %v", h, n, err)
			}
		}
		for i, h := range sc.Headers {
			if h == "" || h != http.CanonicalHeaderKey(h) || strings.ContainsAny(h, ": \r\n\x00") || slices.ContainsFunc(sc.Headers[:i], func(o string) bool { return strings.EqualFold(o, h) }) {
				t.Fatalf("header %q kept in %v", h, sc.Headers)
			}
			switch strings.ToLower(h) {
			case "host", "content-length", "transfer-encoding", "connection":
				t.Fatalf("header %q kept", h)
			}
		}
	})
}
