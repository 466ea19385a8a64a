// Package gitignore matches paths against .gitignore patterns in Go, so that moat can
// leave ignored files (node_modules, build outputs) out of a workspace snapshot without
// running git on a sandbox's tree.
//
// The syntax is gitignore(5): blank lines and "#" comments are skipped, trailing spaces are
// dropped unless escaped, "!" negates, "\" escapes the next character, a trailing "/"
// matches directories only, a pattern with a "/" at the start or in the middle is anchored
// to the directory of its .gitignore file (otherwise it matches the last component at any
// depth), "*" and "?" do not match "/", "[...]" is a bracket expression (with "!" or "^"
// negation, ranges and [:class:]es; never matching "/"), "**/" at the start, "/**/" in the
// middle and "/**" at the end cross directories, and other "**" are "*". Deeper
// .gitignore files win over higher ones and, within a file, the last matching pattern
// wins; a path below an ignored directory is ignored whatever the patterns say.
//
// Patterns become Go regular expressions (RE2: linear time, whatever a sandbox writes).
// Differences from git: matching is per character of the UTF-8 text (git's is per byte:
// "?" matches one multi-byte character here, and a byte that is not valid UTF-8 in a
// pattern or a path matches any such byte); core.ignoreCase is not honoured; bracket
// expressions with invalid ranges match nothing.
package gitignore

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxPatterns bounds the patterns taken from one file; the rest are dropped.
const MaxPatterns = 10000

// MaxPatternLen bounds one pattern's length; longer lines are dropped.
const MaxPatternLen = 4096

// Pattern is one compiled line of a .gitignore file.
type Pattern struct {
	Text     string // the line as written (after trimming)
	Negate   bool   // "!pattern": re-includes
	DirOnly  bool   // "pattern/": matches directories only
	Anchored bool   // matched against the path relative to the file's directory, else the last component
	re       *regexp.Regexp
}

// Parse compiles the lines of one .gitignore file. Lines that are not valid patterns (an
// unterminated bracket, a trailing backslash, too long) are dropped, as git drops
// patterns that can never match. It is pure and never fails.
func Parse(data []byte) []Pattern {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var out []Pattern
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if len(out) >= MaxPatterns {
			break
		}
		if p, ok := parseLine(string(line)); ok {
			out = append(out, p)
		}
	}
	return out
}

func parseLine(line string) (Pattern, bool) {
	line = strings.TrimSuffix(line, "\r")
	if len(line) > MaxPatternLen || line == "" || line[0] == '#' {
		return Pattern{}, false
	}
	line = trimTrailingSpaces(line)
	p := Pattern{}
	if strings.HasPrefix(line, "!") {
		p.Negate = true
		line = line[1:]
	}
	if line == "" {
		return Pattern{}, false
	}
	p.Text = line
	if strings.HasSuffix(line, "/") && !escapedAt(line, len(line)-1) {
		p.DirOnly = true
		line = line[:len(line)-1] // only one, as git
		if line == "" {
			return Pattern{}, false // "/" alone matches nothing in git either
		}
	}
	// A slash anywhere but at the end anchors the pattern.
	if strings.Contains(line, "/") {
		p.Anchored = true
		line = strings.TrimPrefix(line, "/")
		if line == "" {
			return Pattern{}, false
		}
	}
	expr, ok := translate(line, p.Anchored)
	if !ok {
		return Pattern{}, false
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return Pattern{}, false
	}
	p.re = re
	return p, true
}

// trimTrailingSpaces removes unescaped trailing spaces (git's trim_trailing_spaces).
func trimTrailingSpaces(s string) string {
	end := len(s)
	for end > 0 && s[end-1] == ' ' && !escapedAt(s, end-1) {
		end--
	}
	return s[:end]
}

// escapedAt reports whether s[i] is preceded by an odd number of backslashes.
func escapedAt(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// translate turns a wildmatch pattern (without the leading "!"/"/" and trailing "/") into
// an anchored regular expression over the path. ok is false for a pattern git can never
// match (unterminated bracket, trailing backslash).
//
// git compares an anchored pattern's literal prefix (up to the first "*", "?", "[" or "\")
// first and matches the rest as a pattern of its own, so a "**" right after that prefix
// counts as at the start: "x**/a" matches "x/y/a". translate does the same.
func translate(pat string, anchored bool) (string, bool) {
	prefix := -1
	if anchored {
		prefix = strings.IndexAny(pat, "*?[\\")
	}
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(pat); {
		c := pat[i]
		switch c {
		case '\\':
			if i+1 >= len(pat) {
				return "", false
			}
			r, n := decodeRune(pat[i+1:])
			b.WriteString(literal(r))
			i += 1 + n
		case '?':
			b.WriteString(`[^/]`)
			i++
		case '*':
			j := i
			for j < len(pat) && pat[j] == '*' {
				j++
			}
			double := j-i >= 2
			startOK := i == 0 || pat[i-1] == '/' || i == prefix
			endOK := j == len(pat) || pat[j] == '/'
			switch {
			case double && startOK && j < len(pat) && pat[j] == '/':
				// "**/" at the start or "/**/": zero or more whole directories.
				b.WriteString(`(?:.*/)?`)
				j++
			case double && startOK && endOK && i > 0:
				// trailing "/**": everything inside.
				b.WriteString(`.*`)
			case double && startOK && endOK:
				// "**" alone: everything.
				b.WriteString(`.*`)
			default:
				b.WriteString(`[^/]*`)
			}
			i = j
		case '[':
			class, n, ok := bracket(pat[i:])
			if !ok {
				return "", false
			}
			b.WriteString(class)
			i += n
		default:
			r, n := decodeRune(pat[i:])
			b.WriteString(literal(r))
			i += n
		}
	}
	b.WriteString(`$`)
	return b.String(), true
}

// decodeRune is utf8.DecodeRuneInString, with an invalid byte as U+FFFD (which is what Go's
// regexp sees for an invalid byte of the path too).
func decodeRune(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return utf8.RuneError, 1
	}
	return r, n
}

func literal(r rune) string {
	return regexp.QuoteMeta(string(r))
}

// classes returns the POSIX classes wildmatch knows, as ASCII rune ranges.
func classes() map[string][][2]rune {
	return map[string][][2]rune{
		"alnum":  {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}},
		"alpha":  {{'A', 'Z'}, {'a', 'z'}},
		"blank":  {{' ', ' '}, {'\t', '\t'}},
		"cntrl":  {{0, 0x1f}, {0x7f, 0x7f}},
		"digit":  {{'0', '9'}},
		"graph":  {{0x21, 0x7e}},
		"lower":  {{'a', 'z'}},
		"print":  {{0x20, 0x7e}},
		"punct":  {{0x21, 0x2f}, {0x3a, 0x40}, {0x5b, 0x60}, {0x7b, 0x7e}},
		"space":  {{'\t', '\r'}, {' ', ' '}},
		"upper":  {{'A', 'Z'}},
		"xdigit": {{'0', '9'}, {'A', 'F'}, {'a', 'f'}},
	}
}

// bracket translates the bracket expression at the start of s ("[...]") into a regexp
// character class that never matches "/". n is the bytes consumed; ok false when it is
// unterminated or has an unknown class (git: no match).
func bracket(s string) (class string, n int, ok bool) {
	i := 1
	negate := false
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		negate = true
		i++
	}
	var ranges [][2]rune
	first := true
	for {
		if i >= len(s) {
			return "", 0, false
		}
		c := s[i]
		if c == ']' && !first {
			i++
			break
		}
		first = false
		var lo rune
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return "", 0, false
			}
			r, w := decodeRune(s[i+1:])
			lo = r
			i += 1 + w
		case c == '[' && i+1 < len(s) && s[i+1] == ':':
			end := strings.Index(s[i+2:], ":]")
			if end < 0 {
				return "", 0, false
			}
			name := s[i+2 : i+2+end]
			rs, known := classes()[name]
			if !known {
				return "", 0, false
			}
			ranges = append(ranges, rs...)
			i += 2 + end + 2
			continue
		default:
			r, w := decodeRune(s[i:])
			lo = r
			i += w
		}
		hi := lo
		// A range "a-z" (a "-" before the closing "]" is literal).
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			i++
			if s[i] == '\\' {
				if i+1 >= len(s) {
					return "", 0, false
				}
				r, w := decodeRune(s[i+1:])
				hi = r
				i += 1 + w
			} else {
				r, w := decodeRune(s[i:])
				hi = r
				i += w
			}
			if hi < lo {
				continue // an empty range matches nothing
			}
		}
		ranges = append(ranges, [2]rune{lo, hi})
	}
	var b strings.Builder
	b.WriteByte('[')
	if negate {
		b.WriteString(`^/`)
		for _, r := range ranges {
			writeRange(&b, r[0], r[1])
		}
	} else {
		any := false
		for _, r := range ranges {
			// Never "/": split a range that holds it.
			if r[0] <= '/' && '/' <= r[1] {
				if r[0] < '/' {
					writeRange(&b, r[0], '/'-1)
					any = true
				}
				if r[1] > '/' {
					writeRange(&b, '/'+1, r[1])
					any = true
				}
				continue
			}
			writeRange(&b, r[0], r[1])
			any = true
		}
		if !any {
			return `[^\x00-\x{10FFFF}]`, i, true // matches nothing
		}
	}
	b.WriteByte(']')
	return b.String(), i, true
}

func writeRange(b *strings.Builder, lo, hi rune) {
	fmt.Fprintf(b, `\x{%x}`, lo)
	if hi != lo {
		fmt.Fprintf(b, `-\x{%x}`, hi)
	}
}

// Match reports whether p matches the path rel (relative to the directory of p's file,
// "/"-separated), whose last component is base; dir says whether it is a directory.
func (p Pattern) Match(rel string, dir bool) bool {
	if p.DirOnly && !dir {
		return false
	}
	if p.Anchored {
		return p.re.MatchString(rel)
	}
	base := rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		base = rel[i+1:]
	}
	return p.re.MatchString(base)
}

// Decide looks through patterns from the last to the first and returns whether the last
// one that matches ignores the path (matched=false when none does).
func Decide(patterns []Pattern, rel string, dir bool) (ignored, matched bool) {
	for i := len(patterns) - 1; i >= 0; i-- {
		if patterns[i].Match(rel, dir) {
			return !patterns[i].Negate, true
		}
	}
	return false, false
}
