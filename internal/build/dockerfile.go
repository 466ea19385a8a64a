// Package build builds moat templates step by step (docs/internals.md, "Template builds").
// A build is a base (FROM) and a list of Steps; each step that changes files runs in a
// build sandbox made from the state before it, and what it changed becomes a layer keyed by
// hash(parent key, step, content of copied files), so an unchanged prefix of steps is
// reused from the cache. The Dockerfile front end (ParseDockerfile) is one source of steps;
// E2B's template builder is another.
package build

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"unicode"

	"github.com/moatdev/moat/internal/errdefs"
)

// Kind is what a step does.
type Kind string

// Step kinds.
const (
	Run     Kind = "RUN"     // Argv (exec form), or Shell (shell form: /bin/sh -c)
	Copy    Kind = "COPY"    // Sources (context-relative) to Dest, owned by Chown
	Env     Kind = "ENV"     // Vars
	Workdir Kind = "WORKDIR" // Path (created if missing)
	User    Kind = "USER"    // Path holds the user
	Arg     Kind = "ARG"     // Vars: a default for substitution
	Label   Kind = "LABEL"   // Vars: recorded in the template
	Cmd     Kind = "CMD"     // Argv or Shell: recorded (sandboxes do not run it)
	Entry   Kind = "ENTRYPOINT"
)

// Var is one KEY=VALUE of ENV, ARG or LABEL.
type Var struct{ Key, Value string }

// Step is one instruction.
type Step struct {
	Line    int  // 1-based line of the instruction in its file (0: not from a file)
	Kind    Kind //
	Argv    []string
	Shell   string
	Sources []string
	Dest    string
	Chown   string
	Vars    []Var
	Path    string
	// From E2B's builder (e2b.go): RunAs is the user one RUN runs as (else USER's);
	// Mode, when not 0, is the permissions of the files a COPY writes.
	RunAs string
	Mode  fs.FileMode
}

// Dockerfile is a parsed Dockerfile: FROM's reference and the steps after it.
type Dockerfile struct {
	From     string
	FromLine int
	Steps    []Step
}

// maxDockerfile bounds the input of ParseDockerfile.
const maxDockerfile = 512 << 10

// ParseDockerfile parses the supported subset of the Dockerfile syntax: one FROM (no
// stage name, no --platform), then RUN, COPY [--chown=U[:G]], ENV, WORKDIR, USER, ARG,
// LABEL, CMD and ENTRYPOINT. Comments (# at the start of a line), blank lines, line
// continuations (a trailing backslash) and the JSON exec form are understood. Parser
// directives (# syntax=, # escape=) are refused, as is everything else, with the line
// number. Errors wrap errdefs.ErrInvalidArgument.
func ParseDockerfile(data []byte) (*Dockerfile, error) {
	if len(data) > maxDockerfile {
		return nil, fmt.Errorf("Dockerfile is larger than %d bytes: %w", maxDockerfile, errdefs.ErrInvalidArgument)
	}
	lines, err := logicalLines(string(data))
	if err != nil {
		return nil, err
	}
	df := &Dockerfile{}
	for _, l := range lines {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("Dockerfile line %d: %s: %w", l.n, fmt.Sprintf(format, a...), errdefs.ErrInvalidArgument)
		}
		word, rest := splitWord(l.text)
		instr := strings.ToUpper(word)
		if df.From == "" && instr != "FROM" && instr != "ARG" {
			return nil, bad("%s before FROM", instr)
		}
		switch instr {
		case "FROM":
			if df.From != "" {
				return nil, bad("a second FROM: multi-stage builds are not supported")
			}
			f := strings.Fields(rest)
			if len(f) != 1 || strings.HasPrefix(f[0], "--") {
				return nil, bad("FROM takes one image or template (no stage name or flags)")
			}
			df.From, df.FromLine = f[0], l.n
			continue
		case "RUN", "CMD", "ENTRYPOINT":
			s := Step{Line: l.n, Kind: Kind(instr)}
			if strings.HasPrefix(rest, "--") {
				return nil, bad("%s flags are not supported", instr)
			}
			if argv, ok, err := execForm(rest); err != nil {
				return nil, bad("%s: %v", instr, err)
			} else if ok {
				s.Argv = argv
			} else {
				s.Shell = rest
			}
			if len(s.Argv) == 0 && s.Shell == "" && instr == "RUN" {
				return nil, bad("RUN needs a command")
			}
			df.Steps = append(df.Steps, s)
		case "COPY", "ADD":
			if instr == "ADD" {
				return nil, bad("ADD is not supported (use COPY; URLs and archives are not unpacked)")
			}
			s := Step{Line: l.n, Kind: Copy}
			for strings.HasPrefix(rest, "--") {
				var flag string
				flag, rest = splitWord(rest)
				v, ok := strings.CutPrefix(flag, "--chown=")
				if !ok || v == "" {
					return nil, bad("COPY flag %q is not supported (only --chown=USER[:GROUP])", flag)
				}
				s.Chown = v
			}
			args, ok, err := execForm(rest)
			if err != nil {
				return nil, bad("COPY: %v", err)
			}
			if !ok {
				args = strings.Fields(rest)
			}
			if len(args) < 2 {
				return nil, bad("COPY needs a source and a destination")
			}
			s.Sources, s.Dest = args[:len(args)-1], args[len(args)-1]
			df.Steps = append(df.Steps, s)
		case "ENV", "ARG", "LABEL":
			vars, err := parseVars(instr, rest)
			if err != nil {
				return nil, bad("%v", err)
			}
			if instr == "ARG" && df.From == "" {
				return nil, bad("ARG before FROM is not supported")
			}
			df.Steps = append(df.Steps, Step{Line: l.n, Kind: Kind(instr), Vars: vars})
		case "WORKDIR", "USER":
			v := strings.TrimSpace(rest)
			if v == "" || strings.ContainsAny(v, "\n\x00") {
				return nil, bad("%s needs a value", instr)
			}
			if instr == "WORKDIR" && strings.HasPrefix(v, "[") {
				return nil, bad("WORKDIR takes a path")
			}
			df.Steps = append(df.Steps, Step{Line: l.n, Kind: Kind(instr), Path: v})
		case "":
			return nil, bad("empty instruction")
		default:
			return nil, bad("%s is not supported (supported: FROM, RUN, COPY, ENV, WORKDIR, USER, ARG, LABEL, CMD, ENTRYPOINT)", strings.ToUpper(termSafe(word)))
		}
	}
	if df.From == "" {
		return nil, fmt.Errorf("Dockerfile has no FROM: %w", errdefs.ErrInvalidArgument)
	}
	return df, nil
}

type logicalLine struct {
	n    int // line of its first physical line
	text string
}

// logicalLines joins continued lines and drops comments and blank lines. A comment line
// inside a continued instruction is skipped (as Docker does).
func logicalLines(src string) ([]logicalLine, error) {
	var out []logicalLine
	var cur strings.Builder
	start := 0
	phys := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	for i, raw := range phys {
		n := i + 1
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "#") {
			if start == 0 && len(out) == 0 && isDirective(trimmed) {
				return nil, fmt.Errorf("Dockerfile line %d: parser directives (%s) are not supported: %w", n, trimmed, errdefs.ErrInvalidArgument)
			}
			continue
		}
		if strings.IndexByte(raw, 0) >= 0 {
			return nil, fmt.Errorf("Dockerfile line %d: NUL byte: %w", n, errdefs.ErrInvalidArgument)
		}
		if trimmed == "" && start == 0 {
			continue
		}
		if start == 0 {
			start = n
		}
		body, continued := strings.CutSuffix(strings.TrimRightFunc(raw, unicode.IsSpace), `\`)
		if cur.Len() > 0 && body != "" {
			cur.WriteByte(' ')
		}
		cur.WriteString(strings.TrimSpace(body))
		if continued && i < len(phys)-1 {
			continue
		}
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, logicalLine{n: start, text: t})
		}
		cur.Reset()
		start = 0
	}
	return out, nil
}

// isDirective tells a parser directive ("# syntax=…", "# escape=…") from a comment.
func isDirective(comment string) bool {
	k, _, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(comment, "#")), "=")
	k = strings.ToLower(strings.TrimSpace(k))
	return ok && (k == "syntax" || k == "escape" || k == "check")
}

func splitWord(s string) (word, rest string) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// execForm parses the JSON array form ["prog", "arg"]. ok is false for the shell form
// (anything not starting with '['); a '[' that is not a JSON array of strings is an error.
func execForm(s string) (argv []string, ok bool, err error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") {
		return nil, false, nil
	}
	if err := json.Unmarshal([]byte(s), &argv); err != nil {
		// Docker runs a malformed array as a shell line; moat says so instead.
		return nil, false, fmt.Errorf("not a JSON array of strings (%v)", err)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, false, fmt.Errorf("empty exec form")
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, false, fmt.Errorf("NUL in an argument")
		}
	}
	return argv, true, nil
}

// parseVars parses ENV/ARG/LABEL arguments: KEY=VALUE pairs (values may be quoted with "
// or ', with \ escapes in "…" and outside quotes), or ENV's legacy "KEY VALUE" form. ARG
// may name a key without a value.
func parseVars(instr, s string) ([]Var, error) {
	if s == "" {
		return nil, fmt.Errorf("%s needs KEY=VALUE", instr)
	}
	first, rest := splitWord(s)
	if instr == "ENV" && !strings.Contains(first, "=") {
		if rest == "" {
			return nil, fmt.Errorf("ENV %s needs a value", first)
		}
		if !validKey(first) {
			return nil, fmt.Errorf("ENV name %q is not a valid variable name", first)
		}
		return []Var{{first, rest}}, nil
	}
	words, err := shellWords(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", instr, err)
	}
	var out []Var
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok && instr != "ARG" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", instr, w)
		}
		if instr == "LABEL" {
			if k == "" {
				return nil, fmt.Errorf("LABEL with an empty key")
			}
		} else if !validKey(k) {
			return nil, fmt.Errorf("%s name %q is not a valid variable name", instr, k)
		}
		out = append(out, Var{k, v})
	}
	return out, nil
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// shellWords splits s into words at unquoted blanks, removing quotes: '…' literal, "…"
// with \" and \\ escapes, and \ escaping the next character outside quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf(`unterminated "`)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// termSafe keeps an instruction word printable in an error.
func termSafe(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}

// Text is the step's canonical form: what its cache key hashes (with its parent's key and
// the content of the files it copies).
func (s Step) Text() string {
	b, _ := json.Marshal(struct {
		K       Kind
		Argv    []string `json:",omitempty"`
		Shell   string   `json:",omitempty"`
		Sources []string `json:",omitempty"`
		Dest    string   `json:",omitempty"`
		Chown   string   `json:",omitempty"`
		Vars    []Var    `json:",omitempty"`
		Path    string   `json:",omitempty"`
		RunAs   string   `json:",omitempty"`
		Mode    uint32   `json:",omitempty"`
	}{s.Kind, s.Argv, s.Shell, s.Sources, s.Dest, s.Chown, s.Vars, s.Path, s.RunAs, uint32(s.Mode)})
	return string(b)
}

// String is the step as progress shows it.
func (s Step) String() string {
	var arg string
	switch {
	case len(s.Argv) > 0:
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s.Argv)
		arg = strings.TrimSpace(b.String())
	case s.Shell != "":
		arg = s.Shell
	case s.Kind == Copy:
		arg = strings.Join(append(append([]string(nil), s.Sources...), s.Dest), " ")
		if s.Chown != "" {
			arg = "--chown=" + s.Chown + " " + arg
		}
	case len(s.Vars) > 0:
		var kv []string
		for _, v := range s.Vars {
			kv = append(kv, v.Key+"="+v.Value)
		}
		arg = strings.Join(kv, " ")
	default:
		arg = s.Path
	}
	out := string(s.Kind) + " " + arg
	if s.RunAs != "" {
		out += " (as " + s.RunAs + ")"
	}
	if s.Mode != 0 {
		out += fmt.Sprintf(" (mode %04o)", uint32(s.Mode))
	}
	if len(out) > 200 {
		out = out[:200] + "…"
	}
	return termSafe200(out)
}

func termSafe200(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}
