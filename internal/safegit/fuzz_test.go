package safegit

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// Seeds live in testdata/fuzz/<FuzzName>/ (real git output among them).

func FuzzParseNumstat(f *testing.F) {
	f.Add([]byte("1\t2\tREADME.md\x00-\t-\tblob.bin\x000\t0\t\x00old\x00new\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := ParseNumstat(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error of the wrong class: %v", err)
			}
			return
		}
		// Accepted input re-renders to itself: nothing was skipped or invented.
		var sb strings.Builder
		for _, fc := range files {
			if fc.Path == "" || strings.ContainsRune(fc.Path, 0) || fc.Added < 0 || fc.Removed < 0 {
				t.Fatalf("bad entry %+v", fc)
			}
			if fc.Binary {
				sb.WriteString("-\t-\t")
			} else {
				sb.WriteString(strconv.FormatInt(fc.Added, 10) + "\t" + strconv.FormatInt(fc.Removed, 10) + "\t")
			}
			if fc.OldPath != "" {
				sb.WriteString("\x00" + fc.OldPath + "\x00" + fc.Path + "\x00")
			} else {
				sb.WriteString(fc.Path + "\x00")
			}
		}
		if sb.String() != string(b) {
			// Counts with leading zeros parse but do not re-render; git never prints them.
			if again, err := ParseNumstat([]byte(sb.String())); err != nil || len(again) != len(files) {
				t.Fatalf("re-rendered %q does not parse back: %v", sb.String(), err)
			}
		}
	})
}

func FuzzParseLog(f *testing.F) {
	id := strings.Repeat("a", 40)
	f.Add([]byte(id + "\x00" + id + "\x00A\x00a@x\x002023-11-14T22:13:20+00:00\x00C\x00c@x\x002023-11-14T22:13:20+00:00\x00subject\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		commits, err := ParseLog(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error of the wrong class: %v", err)
			}
			return
		}
		for _, c := range commits {
			if CheckObjectID(c.ID) != nil {
				t.Fatalf("bad id %q", c.ID)
			}
			for _, p := range c.Parents {
				if CheckObjectID(p) != nil {
					t.Fatalf("bad parent %q", p)
				}
			}
			for _, s := range []string{c.AuthorName, c.AuthorEmail, c.Subject, c.CommitterName} {
				if strings.ContainsRune(s, 0) {
					t.Fatalf("NUL in a field: %+v", c)
				}
			}
		}
	})
}

func FuzzParsePackHeader(f *testing.F) {
	f.Add([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x03"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParsePackHeader(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error of the wrong class: %v", err)
			}
			return
		}
		if len(b) < 12 || string(b[:4]) != "PACK" || uint32(b[8])<<24|uint32(b[9])<<16|uint32(b[10])<<8|uint32(b[11]) != n {
			t.Fatalf("accepted %q as %d objects", b, n)
		}
	})
}

// unquoteC undoes QuotePath (git's C-style quoting) for the fuzz check.
func unquoteC(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			return "", false
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			return "", false
		}
		switch s[i] {
		case '"', '\\':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		default:
			if i+3 > len(s) {
				return "", false
			}
			v, err := strconv.ParseUint(s[i:i+3], 8, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(v))
			i += 2
		}
	}
	return b.String(), true
}

func FuzzQuotePath(f *testing.F) {
	for _, s := range []string{"a b.txt", "quote\"d", "new\nline", "\"x", "é", "\xff", "a\\b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		q := QuotePath(p)
		if strings.ContainsAny(q, "\n\x00") {
			t.Fatalf("QuotePath(%q) = %q has a line break or NUL", p, q)
		}
		if q == p {
			if p == "" || p[0] == '"' || strings.ContainsAny(p, "\\") {
				t.Fatalf("QuotePath(%q) left it unquoted", p)
			}
			return
		}
		if u, ok := unquoteC(q); !ok || u != p {
			t.Fatalf("QuotePath(%q) = %q unquotes to %q, %v", p, q, u, ok)
		}
	})
}

func FuzzCheckRefName(f *testing.F) {
	for _, s := range []string{"refs/heads/main", "refs/heads/agent/x", "refs/heads/a..b", "refs/x.lock", "--all"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if CheckRefName(ref) != nil {
			return
		}
		if !strings.HasPrefix(ref, "refs/") || strings.ContainsAny(ref, " :^~?*[\\\x00\n") || strings.Contains(ref, "..") {
			t.Fatalf("accepted %q", ref)
		}
	})
}
