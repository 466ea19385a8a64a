package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// parseSize reads a size such as 512M, 2G, 1.5GiB, 100MB or 1048576 (bytes). Units are
// binary (K = 1024) whether or not they carry the "i". It rejects negative, fractional-byte
// and overflowing values.
func parseSize(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("size %q: empty", orig)
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToUpper(strings.TrimSpace(s[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: expected a number such as 512M or 2G", orig)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("size %q: expected a number such as 512M or 2G", orig)
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (use K, M, G or T)", orig, s[i:])
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", orig)
	}
	if b != math.Trunc(b) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", orig)
	}
	return int64(b), nil
}

// parseDuration reads a Go duration (90s, 5m, 1h30m) or a plain number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/int64(time.Second) {
			return 0, fmt.Errorf("duration %q: out of range", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: expected e.g. 90s, 5m or 1h", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q: negative", s)
	}
	return d, nil
}

// parseEnv reads KEY=VALUE pairs.
func parseEnv(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: expected KEY=VALUE", p)
		}
		out[k] = v
	}
	return out, nil
}

// shellLine turns argv into one bash command line: a single argument is taken as a script
// line as written (moat run -- 'make test && echo ok'); several are quoted word by word.
func shellLine(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// splitRemote splits "ID:PATH" into its parts; a plain local path has ok == false.
func splitRemote(arg string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(arg, ":")
	if !ok || !strings.HasPrefix(id, "sb-") || strings.Contains(id, "/") {
		return "", arg, false
	}
	return id, path, true
}

// parseCredentials reads --credential NAME@[http://]HOST[,HOST...][/PATH-PREFIX][=HEADER]
// and --credential-header NAME@[http://]HOST[,HOST...][/PATH-PREFIX]='Header: template'.
// With a path prefix the value goes only into requests whose path starts with it; with
// http:// also into plain HTTP requests. HEADER is the header the placeholder is swapped
// in (default Authorization).
func parseCredentials(plain, headers []string) ([]v1.Credential, error) {
	var out []v1.Credential
	for _, s := range plain {
		binding, header, named := strings.Cut(s, "=")
		c, err := parseBinding("--credential", binding)
		if err != nil {
			return nil, err
		}
		if named {
			if header = strings.TrimSpace(header); header == "" || strings.ContainsAny(header, ": ") {
				return nil, fmt.Errorf("--credential %q: after = comes the name of the header the placeholder is swapped in, e.g. =x-api-key", s)
			}
			c.PlaceholderHeader = header
		}
		out = append(out, c)
	}
	for _, s := range headers {
		binding, header, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("--credential-header %q: want NAME@HOST='Header: template'", s)
		}
		c, err := parseBinding("--credential-header", binding)
		if err != nil {
			return nil, err
		}
		h, tmpl, ok := strings.Cut(header, ":")
		if !ok || strings.TrimSpace(h) == "" || !strings.Contains(tmpl, "{{value}}") {
			return nil, fmt.Errorf("--credential-header %q: the header must look like 'Authorization: Bearer {{value}}'", s)
		}
		c.Header, c.Template = strings.TrimSpace(h), strings.TrimSpace(tmpl)
		out = append(out, c)
	}
	return out, nil
}

// credential reads --github-token NAME@HOST[,HOST...] with --github-repo and
// --github-permission PERMISSION=LEVEL; nil when none is given.
func (g githubFlags) credential() (*v1.Credential, error) {
	if g.token == "" {
		if len(g.repos) > 0 || len(g.perms) > 0 {
			return nil, errors.New("--github-repo and --github-permission scope a --github-token; give one")
		}
		return nil, nil
	}
	c, err := parseBinding("--github-token", g.token)
	if err != nil {
		return nil, err
	}
	if len(g.repos) == 0 {
		return nil, errors.New("--github-token needs --github-repo: a token is limited to the repositories the task works on")
	}
	scope := &v1.GitHubScope{Repositories: g.repos}
	for _, p := range g.perms {
		k, level, ok := strings.Cut(p, "=")
		if !ok {
			k, level, ok = strings.Cut(p, ":")
		}
		if !ok || k == "" || level == "" {
			return nil, fmt.Errorf("--github-permission %q: want PERMISSION=LEVEL, e.g. contents=write", p)
		}
		if scope.Permissions == nil {
			scope.Permissions = map[string]string{}
		}
		scope.Permissions[k] = level
	}
	c.GitHub = scope
	return &c, nil
}

// parseBinding reads NAME@[http://]HOST[:PORT][,HOST...][/PATH-PREFIX], the part of a
// binding flag the kinds share.
func parseBinding(flag, s string) (v1.Credential, error) {
	name, hosts, ok := strings.Cut(s, "@")
	if !ok || name == "" || hosts == "" {
		return v1.Credential{}, fmt.Errorf("%s %q: want NAME@[http://]HOST[:PORT][,HOST...][/PATH-PREFIX]", flag, s)
	}
	c := v1.Credential{Secret: name}
	if rest, ok := strings.CutPrefix(hosts, "http://"); ok {
		hosts, c.PlainHTTP = rest, true
	}
	if i := strings.IndexByte(hosts, '/'); i >= 0 {
		hosts, c.PathPrefix = hosts[:i], hosts[i:]
	}
	c.Hosts = strings.Split(hosts, ",")
	return c, nil
}
