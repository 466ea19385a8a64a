package safegit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// searchPath is the fixed PATH of every git process (git finds its helpers in its own exec
// path; PATH only matters for git itself and for upload-pack/pack-objects it spawns).
const searchPath = "/usr/local/bin:/usr/bin:/bin"

// Default limits of one git invocation.
const (
	DefaultTimeout   = 5 * time.Minute
	DefaultMaxOutput = 16 << 20
	maxStderr        = 64 << 10
)

// baseConfig are the command-line (-c) overrides of every git invocation. Command-line
// configuration is read after every file and is "protected" configuration, so it wins over
// anything a repository's config could say. It is exported to every git process git
// starts (GIT_CONFIG_PARAMETERS), e.g. pack-objects and index-pack.
func baseConfig() []string {
	return []string{
		"core.hooksPath=/dev/null",
		"core.fsmonitor=false",
		"core.untrackedCache=false",
		"core.sshCommand=false",
		"core.askPass=false",
		"core.attributesFile=/dev/null",
		"core.excludesFile=/dev/null",
		"core.pager=cat",
		"core.editor=false",
		"core.quotePath=false",
		"credential.helper=",
		"protocol.allow=never",
		"transfer.fsckObjects=true",
		"fetch.fsckObjects=true",
		"receive.fsckObjects=true",
		"submodule.recurse=false",
		"fetch.recurseSubmodules=false",
		"gc.auto=0",
		"maintenance.auto=false",
		"log.mailmap=false",
		"mailmap.file=/dev/null",
		"mailmap.blob=",
		"log.showSignature=false",
		"commit.gpgSign=false",
		"tag.gpgSign=false",
		"gpg.program=false",
		"color.ui=false",
		"diff.noprefix=false",
		"diff.mnemonicPrefix=false",
		"diff.relative=false",
	}
}

// Runner runs git with an isolated environment. It is safe for concurrent use.
type Runner struct {
	git  string // absolute path of the git binary
	home string // an empty directory, HOME of every git process
	log  *slog.Logger
}

// NewRunner returns a runner whose git processes get home (created 0700 if missing; it must
// be empty) as HOME. git is looked up in the fixed PATH, never the daemon's.
func NewRunner(log *slog.Logger, home string) (*Runner, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	git, err := lookGit()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("git home %s: %w", home, err)
	}
	ents, err := os.ReadDir(home)
	if err != nil {
		return nil, fmt.Errorf("git home %s: %w", home, err)
	}
	if len(ents) != 0 {
		return nil, fmt.Errorf("git home %s is not empty: %w", home, errdefs.ErrConflict)
	}
	return &Runner{git: git, home: home, log: log}, nil
}

func lookGit() (string, error) {
	for _, dir := range strings.Split(searchPath, ":") {
		p := dir + "/git"
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("git not found in %s: %w", searchPath, errdefs.ErrUnavailable)
}

// env is the whole environment of a git process.
func (r *Runner) env() []string {
	return []string{
		"PATH=" + searchPath,
		"HOME=" + r.home,
		"XDG_CONFIG_HOME=" + r.home + "/.config",
		"LC_ALL=C",
		"LANG=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=false",
		"SSH_ASKPASS=false",
		"GIT_SSH_COMMAND=false",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_LITERAL_PATHSPECS=1",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_NO_LAZY_FETCH=1",
	}
}

// invocation is one git command.
type invocation struct {
	gitDir string   // --git-dir; "" only for commands that need no repository
	config []string // extra -c key=value after baseConfig()
	args   []string
	stdin  io.Reader
	stdout io.Writer // nil: collected, at most maxOut bytes
	maxOut int64     // 0: DefaultMaxOutput
	// okCodes are exit codes other than 0 that are answers, not failures (e.g. 1 of
	// merge-base --is-ancestor); run returns them as *exitCode.
	okCodes []int
	cred    *syscall.Credential // run as this user (export into a user's repository)
	// env is added to the fixed environment: GIT_CONFIG_COUNT/KEY/VALUE entries for what
	// must not be in argv (readable by every local user in /proc; environ is not).
	env     []string
	timeout time.Duration // 0: DefaultTimeout
}

// exitCode is an expected non-zero exit of git.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("git exited %d", int(e)) }

// argv returns git's arguments (after argv[0]).
func (r *Runner) argv(inv invocation) []string {
	a := []string{"--no-pager", "--no-replace-objects", "--literal-pathspecs"}
	if inv.gitDir != "" {
		a = append(a, "--git-dir="+inv.gitDir)
	}
	for _, c := range baseConfig() {
		a = append(a, "-c", c)
	}
	for _, c := range inv.config {
		a = append(a, "-c", c)
	}
	return append(a, inv.args...)
}

// run runs git and returns its standard output (nil if inv.stdout is set). A non-zero exit
// not in okCodes, a timeout or output beyond the limit is an error; output beyond the limit
// is errdefs.ErrResourceExhausted.
func (r *Runner) run(ctx context.Context, inv invocation) ([]byte, error) {
	timeout := inv.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	maxOut := inv.maxOut
	if maxOut <= 0 {
		maxOut = DefaultMaxOutput
	}

	cmd := exec.CommandContext(ctx, r.git, r.argv(inv)...)
	cmd.Env = append(r.env(), inv.env...)
	cmd.Dir = "/"
	if inv.stdin != nil {
		// Feed stdin through our own pipe: exec would wait for its copy from a reader that
		// may block forever (a stalled client), even after git was killed.
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer pr.Close()
		defer pw.Close()
		cmd.Stdin = pr
		go func() { io.Copy(pw, inv.stdin); pw.Close() }()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: inv.cred}
	// Kill the whole process group: git starts helpers (pack-objects, index-pack).
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second

	var out *boundedBuffer
	if inv.stdout != nil {
		cmd.Stdout = &limitWriter{w: inv.stdout, n: maxOut, cancel: cancel}
	} else {
		out = &boundedBuffer{max: maxOut, cancel: cancel}
		cmd.Stdout = out
	}
	stderr := &boundedBuffer{max: maxStderr, truncate: true}
	cmd.Stderr = stderr

	start := time.Now()
	err := cmd.Run()
	sub := "git"
	if len(inv.args) > 0 {
		sub = inv.args[0]
	}
	r.log.Debug("git", "cmd", sub, "git_dir", inv.gitDir, "duration", time.Since(start), "err", err)

	exceeded := (out != nil && out.exceeded) || limitExceeded(cmd.Stdout)
	switch {
	case exceeded:
		return nil, fmt.Errorf("git %s: output over %d bytes: %w", sub, maxOut, errdefs.ErrResourceExhausted)
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("git %s: %w (%w)", sub, ctx.Err(), errdefs.ErrUnavailable)
	default:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code := ee.ExitCode()
			for _, ok := range inv.okCodes {
				if code == ok {
					return outBytes(out), exitCode(code)
				}
			}
			return nil, &GitError{Cmd: sub, Code: code, Stderr: strings.TrimSpace(stderr.String())}
		}
		return nil, fmt.Errorf("git %s: %w (%w)", sub, err, errdefs.ErrUnavailable)
	}
	return outBytes(out), nil
}

func outBytes(b *boundedBuffer) []byte {
	if b == nil {
		return nil
	}
	return b.buf.Bytes()
}

// GitError is a failed git command. Stderr is git's (bounded) message, which may quote
// sandbox-controlled names: log it, do not show it raw on a terminal.
type GitError struct {
	Cmd    string
	Code   int
	Stderr string
}

func (e *GitError) Error() string {
	return fmt.Sprintf("git %s exited %d: %s", e.Cmd, e.Code, e.Stderr)
}

// Unwrap classifies a failed git command as invalid input: git refused the objects or
// names it was given.
func (e *GitError) Unwrap() error { return errdefs.ErrInvalidArgument }

// boundedBuffer keeps at most max bytes; beyond that it either truncates silently
// (truncate) or records the overflow and cancels the process.
type boundedBuffer struct {
	buf      bytes.Buffer
	max      int64
	truncate bool
	exceeded bool
	cancel   func()
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := b.max - int64(b.buf.Len())
	if int64(len(p)) <= room {
		return b.buf.Write(p)
	}
	if room > 0 {
		b.buf.Write(p[:room])
	}
	if b.truncate {
		return len(p), nil
	}
	b.exceeded = true
	if b.cancel != nil {
		b.cancel()
	}
	return 0, errOutputLimit
}

func (b *boundedBuffer) String() string { return b.buf.String() }

var errOutputLimit = errors.New("output limit reached")

// limitWriter passes at most n bytes to w; beyond that it cancels the process.
type limitWriter struct {
	w        io.Writer
	n        int64
	exceeded bool
	cancel   func()
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		l.exceeded = true
		l.cancel()
		return 0, errOutputLimit
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	return n, err
}

func limitExceeded(w io.Writer) bool {
	l, ok := w.(*limitWriter)
	return ok && l.exceeded
}
