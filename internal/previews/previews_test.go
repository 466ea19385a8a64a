package previews

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

const id = "sb-0123456789ab"

func TestParsePort(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "80": 80, "49999": 49999, "65535": 65535} {
		if got, ok := ParsePort(in); !ok || got != want {
			t.Errorf("ParsePort(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "0", "00", "080", "65536", "99999", "-1", "+80", "8a", " 80", "80 ", "1e3", "0x50", "123456"} {
		if got, ok := ParsePort(in); ok {
			t.Errorf("ParsePort(%q) = %d, accepted", in, got)
		}
	}
}

func TestParseHost(t *testing.T) {
	ok := []struct {
		host, domain string
		want         Target
	}{
		{"8080-" + id + ".preview.localhost:3000", "preview.localhost:3000", Target{id, 8080}},
		{"8080-" + strings.ToUpper(id) + ".Preview.LOCALHOST:3000", "preview.localhost:3000", Target{id, 8080}},
		{"49999-" + id + ".p.example.com", "p.example.com", Target{id, 49999}},
		{"49999-" + id + ".p.example.com:443", "p.example.com", Target{id, 49999}}, // domain without port: any
	}
	for _, c := range ok {
		if got, good := ParseHost(c.host, c.domain); !good || got != c.want {
			t.Errorf("ParseHost(%q, %q) = %v, %v; want %v", c.host, c.domain, got, good, c.want)
		}
	}
	bad := []struct{ host, domain string }{
		{"8080-" + id + ".preview.localhost:3000", ""},
		{"8080-" + id + ".preview.localhost", "preview.localhost:3000"},      // port missing
		{"8080-" + id + ".preview.localhost:3001", "preview.localhost:3000"}, // other port
		{"preview.localhost:3000", "preview.localhost:3000"},                 // the domain itself
		{"x.8080-" + id + ".preview.localhost:3000", "preview.localhost:3000"},
		{"8080-" + id + ".evilpreview.localhost:3000", "preview.localhost:3000"},
		{"8080-" + id + ".preview.localhost.:3000", "preview.localhost:3000"},
		{"0-" + id + ".preview.localhost:3000", "preview.localhost:3000"},
		{"65536-" + id + ".preview.localhost:3000", "preview.localhost:3000"},
		{"080-" + id + ".preview.localhost:3000", "preview.localhost:3000"},
		{"8080" + id + ".preview.localhost:3000", "preview.localhost:3000"},
		{"8080-sb-../..preview.localhost:3000", "preview.localhost:3000"},
		{"8080-sb-0123.456789ab.preview.localhost:3000", "preview.localhost:3000"},
		{"8080-127.0.0.1.preview.localhost:3000", "preview.localhost:3000"},
		{"8080-sb-%2e%2e.preview.localhost:3000", "preview.localhost:3000"},
		{"8080-sb-.preview.localhost:3000", "preview.localhost:3000"},
		{"8080-" + id + "@127.0.0.1.preview.localhost:3000", "preview.localhost:3000"},
		{"127.0.0.1:3000", "preview.localhost:3000"},
		{"", "preview.localhost:3000"},
	}
	for _, c := range bad {
		if got, good := ParseHost(c.host, c.domain); good {
			t.Errorf("ParseHost(%q, %q) = %v, accepted", c.host, c.domain, got)
		}
	}
}

func TestParsePath(t *testing.T) {
	ok := []struct {
		path, rest string
		want       Target
	}{
		{"/preview/" + id + "/8080/", "/", Target{id, 8080}},
		{"/preview/" + id + "/8080", "", Target{id, 8080}},
		{"/preview/" + id + "/8080/a/b?c", "/a/b?c", Target{id, 8080}},
		// Dot segments stay in the rest: they reach only that port's server.
		{"/preview/" + id + "/8080/../..", "/../..", Target{id, 8080}},
		{"/preview/" + id + "/8080/%2e%2e/%2F", "/%2e%2e/%2F", Target{id, 8080}},
	}
	for _, c := range ok {
		got, rest, good := ParsePath(c.path)
		if !good || got != c.want || rest != c.rest {
			t.Errorf("ParsePath(%q) = %v, %q, %v; want %v, %q", c.path, got, rest, good, c.want, c.rest)
		}
	}
	for _, p := range []string{
		"/preview/", "/preview", "/preview/" + id, "/preview/" + id + "/", "/preview/" + id + "/0/",
		"/preview/" + id + "/65536/", "/preview/" + id + "/-1/", "/preview/" + id + "/08080/",
		"/preview/" + id + "/80a/", "/preview/../8080/", "/preview/%2e%2e/8080/", "/preview/sb-../8080/",
		"/preview/sb-0123456789ab.evil/80/", "/preview/127.0.0.1/80/", "/preview//" + id + "/80/",
		"/v1/preview/" + id + "/80/", "/preview/" + strings.ToUpper(id) + "/80/",
	} {
		if got, rest, good := ParsePath(p); good {
			t.Errorf("ParsePath(%q) = %v, %q, accepted", p, got, rest)
		}
	}
}

func TestAllowed(t *testing.T) {
	const tok = "mpt_secret"
	cases := []struct {
		name string
		a    Access
		want bool
	}{
		{"private, owner", Access{Visibility: v1.PortPrivate, MayUse: true}, true},
		{"private, anyone", Access{Visibility: v1.PortPrivate}, false},
		{"default is private", Access{}, false},
		{"private, a token given", Access{Visibility: v1.PortPrivate, Token: tok, Given: tok}, false},
		{"token, right", Access{Visibility: v1.PortToken, Token: tok, Given: tok}, true},
		{"token, wrong", Access{Visibility: v1.PortToken, Token: tok, Given: tok + "x"}, false},
		{"token, prefix", Access{Visibility: v1.PortToken, Token: tok, Given: tok[:4]}, false},
		{"token, none given", Access{Visibility: v1.PortToken, Token: tok}, false},
		{"token, port has none", Access{Visibility: v1.PortToken}, false},
		{"token, owner", Access{Visibility: v1.PortToken, Token: tok, MayUse: true}, true},
		{"public, allowed", Access{Visibility: v1.PortPublic, AllowPublic: true}, true},
		{"public, not allowed", Access{Visibility: v1.PortPublic}, false},
		{"public off, owner", Access{Visibility: v1.PortPublic, MayUse: true}, true},
		{"sandbox token", Access{Visibility: v1.PortPrivate, SandboxToken: tok, Given: tok}, true},
		{"sandbox token wrong", Access{Visibility: v1.PortPrivate, SandboxToken: tok, Given: "x"}, false},
		{"sandbox token empty", Access{Visibility: v1.PortPrivate, SandboxToken: "", Given: ""}, false},
		{"unknown visibility", Access{Visibility: "team", Token: tok, Given: tok, AllowPublic: true}, false},
	}
	for _, c := range cases {
		if got := Allowed(c.a); got != c.want {
			t.Errorf("%s: Allowed = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestGivenToken(t *testing.T) {
	h := http.Header{}
	if GivenToken(h, url.Values{TokenQuery: {"q"}}) != "q" {
		t.Error("query token not read")
	}
	h.Set(E2BTokenHeader, "e")
	if GivenToken(h, url.Values{TokenQuery: {"q"}}) != "e" {
		t.Error("e2b header not preferred to query")
	}
	h.Set(TokenHeader, "m")
	if GivenToken(h, nil) != "m" {
		t.Error("moat header not read")
	}
}

func TestStrip(t *testing.T) {
	h := http.Header{}
	h.Set("Authorization", "Bearer e2b_key")
	h.Set("X-API-KEY", "e2b_key")
	h.Set(TokenHeader, "t")
	h.Set("e2b-traffic-access-token", "t")
	h.Set("E2b-Sandbox-Id", id)
	h.Set("X-Access-Token", "envd")
	h.Add("Cookie", "a=1; moat_session=s3cret; b=2")
	h.Add("Cookie", "MOAT_SESSION=x;c=3")
	h.Set("X-App", "kept")
	u, _ := url.Parse("/x?a=1&moat_preview_token=t&b=2")
	Strip(h, u)
	for _, k := range []string{"Authorization", "X-Api-Key", TokenHeader, E2BTokenHeader, "E2b-Sandbox-Id", "X-Access-Token"} {
		if h.Get(k) != "" {
			t.Errorf("%s kept", k)
		}
	}
	if got := h.Get("Cookie"); got != "a=1; b=2; c=3" || len(h.Values("Cookie")) != 1 {
		t.Errorf("Cookie = %q", h.Values("Cookie"))
	}
	if h.Get("X-App") != "kept" {
		t.Error("the app's header dropped")
	}
	if u.RawQuery != "a=1&b=2" {
		t.Errorf("query = %q, want a=1&b=2", u.RawQuery)
	}
	for raw, want := range map[string]string{
		"z=1&a=%20&moat_preview_token=t":          "z=1&a=%20",
		"moat_preview_token=t;x&y=1":              "y=1",
		"moat%5Fpreview%5Ftoken=t&y=1":            "y=1",
		"MOAT_PREVIEW_TOKEN=t":                    "",
		"q=moat_preview_token&moat_preview_token": "q=moat_preview_token",
	} {
		u := &url.URL{RawQuery: raw}
		Strip(http.Header{}, u)
		if u.RawQuery != want {
			t.Errorf("Strip query %q = %q, want %q", raw, u.RawQuery, want)
		}
	}
	h = http.Header{"Cookie": {"moat_session=only"}}
	Strip(h, &url.URL{})
	if _, ok := h["Cookie"]; ok {
		t.Errorf("Cookie = %q, want none", h.Values("Cookie"))
	}
}

func TestKeepSetCookie(t *testing.T) {
	const prefix = "/preview/" + id + "/8080"
	cases := []struct {
		line, prefix string
		want         bool
	}{
		{"a=1", prefix, true},
		{"a=1; Path=" + prefix + "/", prefix, true},
		{"a=1; Path=" + prefix, prefix, true},
		{"a=1; path=" + prefix + "/x; HttpOnly", prefix, true},
		{"a=1; Path=/", prefix, false},
		{"a=1; Path=/ui", prefix, false},
		{"a=1; Path=" + prefix + "0/", prefix, false},
		{"a=1; Domain=localhost", prefix, false},
		{"moat_session=x; Path=" + prefix + "/", prefix, false},
		{"Moat_Session=x", "", false},
		{"a=1; Path=/", "", true},
		{"a=1; Domain=example.com", "", false},
		{"garbage", "", false},
	}
	for _, c := range cases {
		if got := KeepSetCookie(c.line, c.prefix); got != c.want {
			t.Errorf("KeepSetCookie(%q, %q) = %v, want %v", c.line, c.prefix, got, c.want)
		}
	}
}

func TestListeningPorts(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 00000000:C34F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 0200A8C0:1F90 0100A8C0:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
   3: 0100007F:0000 00000000:0000 0A
   4: 0100007F:ZZZZ 00000000:0000 0A
   5: 0100007F:1F9 00000000:0000 0A
`
	tcp6 := `  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000
   1: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000
`
	if got := ListeningPorts([]byte(tcp + tcp6)); !slices.Equal(got, []int{80, 8080, 49999}) {
		t.Errorf("ListeningPorts = %v", got)
	}
	if got := ListeningPorts(nil); len(got) != 0 {
		t.Errorf("empty: %v", got)
	}
}

func FuzzParseHost(f *testing.F) {
	f.Add("8080-"+id+".preview.localhost:3000", "preview.localhost:3000")
	f.Fuzz(func(t *testing.T, host, domain string) {
		tg, ok := ParseHost(host, domain)
		if !ok {
			return
		}
		if tg.Port < 1 || tg.Port > 65535 || !validID(tg.ID) {
			t.Fatalf("ParseHost(%q, %q) = %v", host, domain, tg)
		}
	})
}

func FuzzParsePath(f *testing.F) {
	f.Add("/preview/" + id + "/8080/a")
	f.Fuzz(func(t *testing.T, p string) {
		tg, rest, ok := ParsePath(p)
		if !ok {
			return
		}
		if tg.Port < 1 || tg.Port > 65535 || !validID(tg.ID) || strings.ContainsAny(tg.ID, "./%") {
			t.Fatalf("ParsePath(%q) = %v", p, tg)
		}
		if PathURL(tg)+strings.TrimPrefix(rest, "/") != p && PathURL(tg) != p+"/" {
			t.Fatalf("ParsePath(%q): %v + %q does not rebuild it", p, tg, rest)
		}
	})
}

func FuzzListeningPorts(f *testing.F) {
	f.Add([]byte("   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps := ListeningPorts(b)
		for i, p := range ps {
			if p < 1 || p > 65535 || i > 0 && ps[i-1] >= p {
				t.Fatalf("ListeningPorts: %v", ps)
			}
		}
	})
}

func FuzzKeepSetCookie(f *testing.F) {
	f.Add("a=1; Path=/preview/"+id+"/80/", "/preview/"+id+"/80")
	f.Fuzz(func(t *testing.T, line, prefix string) {
		if !KeepSetCookie(line, prefix) {
			return
		}
		if strings.Contains(strings.ToLower(line), "domain=") && !strings.Contains(strings.ToLower(line), "domain=;") {
			// A Domain attribute with a value is never kept (a value containing "domain="
			// inside another attribute may be: check the attributes themselves).
			for _, a := range strings.Split(line, ";")[1:] {
				k, _, _ := strings.Cut(strings.TrimSpace(a), "=")
				if strings.EqualFold(strings.TrimSpace(k), "domain") {
					t.Fatalf("kept %q", line)
				}
			}
		}
		name, _, _ := strings.Cut(strings.Split(line, ";")[0], "=")
		if isMoatCookie(name) {
			t.Fatalf("kept moat's cookie %q", line)
		}
	})
}

func FuzzStrip(f *testing.F) {
	f.Add("a=1; moat_session=x; b=2", "Bearer k", "x=1&moat_preview_token=t")
	f.Fuzz(func(t *testing.T, cookie, auth, query string) {
		h := http.Header{"Cookie": {cookie}, "Authorization": {auth}, "X-Api-Key": {auth}}
		u := &url.URL{Path: "/", RawQuery: query}
		Strip(h, u)
		for _, k := range moatHeaders {
			if len(h.Values(k)) > 0 {
				t.Fatalf("%s kept", k)
			}
		}
		for _, part := range strings.Split(h.Get("Cookie"), ";") {
			name, _, _ := strings.Cut(part, "=")
			if isMoatCookie(name) {
				t.Fatalf("moat cookie kept: %q from %q", h.Get("Cookie"), cookie)
			}
		}
		if q, _ := url.ParseQuery(u.RawQuery); q.Has(TokenQuery) {
			t.Fatalf("token query kept: %q", u.RawQuery)
		}
		for _, p := range strings.Split(u.RawQuery, "&") {
			k, _, _ := strings.Cut(p, "=")
			if d, err := url.QueryUnescape(k); err == nil {
				k = d
			}
			if strings.Contains(strings.ToLower(k), TokenQuery) {
				t.Fatalf("token parameter kept: %q", u.RawQuery)
			}
		}
	})
}
