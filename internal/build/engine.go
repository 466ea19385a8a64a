package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Backend is what a build needs from moat: bases, the layer cache and build sandboxes. The
// daemon implements it on its storage and sandbox manager; one Backend serves one build
// (it holds the layers the build uses until Close).
type Backend interface {
	// Base resolves FROM: a local template, or an image reference to pull.
	Base(ctx context.Context, from string, progress func(string)) (Base, error)
	// Cached reports whether the layers of step key, on top of base and the layers of
	// keys (bottom first), exist; cached layers are kept for the rest of the build.
	Cached(ctx context.Context, base Base, keys []string, key string) bool
	// Step starts a build sandbox from base and the layers of keys, calls fn with it, and
	// then captures what fn changed as the layers of key and deletes the sandbox.
	Step(ctx context.Context, base Base, keys []string, key string, fn func(context.Context, Sandbox) error) error
	// Commit stores template name: base, the layers of keys, and img's defaults.
	Commit(ctx context.Context, name string, base Base, keys []string, img Image) error
	// Close releases what the build held.
	Close()
}

// Base is a resolved FROM. RUN steps before any USER run as its User (root when empty).
type Base struct {
	Name       string // the template
	Identity   string // names its content, for the cache keys
	Env        []string
	User       string
	Workdir    string
	Labels     map[string]string
	Cmd        []string
	Entrypoint []string
}

// Sandbox is a running build sandbox.
type Sandbox interface {
	// Exec runs argv in it and returns the exit code; output goes to out.
	Exec(ctx context.Context, e Exec) (int, error)
	// Root calls fn with the sandbox's root filesystem; hostID maps an id inside the
	// sandbox to the owner files must have on the host.
	Root(ctx context.Context, fn func(root *os.Root, hostID func(int) int) error) error
}

// Exec is one command of a RUN step.
type Exec struct {
	Argv    []string
	Env     map[string]string
	User    string
	Workdir string
	Out     io.Writer
}

// Image is what a built template records besides its files.
type Image struct {
	Env        []string
	User       string
	Workdir    string
	Labels     map[string]string
	Cmd        []string
	Entrypoint []string
}

// Request is one build.
type Request struct {
	Name  string // the template to make
	From  string
	Steps []Step
	// Context holds COPY's sources (nil: COPY is refused). Symbolic links in it are
	// copied as links, never followed.
	Context fs.ReadLinkFS
	// Progress receives "step N/M: …" lines and the steps' output.
	Progress func(string)
}

// Report says what a build did.
type Report struct {
	Template string       `json:"template"`
	Steps    []StepReport `json:"steps"`
	Cached   int          `json:"cached"`
	Built    int          `json:"built"`
	Seconds  float64      `json:"seconds"`
}

// StepReport is one step of a Report.
type StepReport struct {
	N      int    `json:"n"`
	Step   string `json:"step"`
	Key    string `json:"key,omitempty"`    // the layer's cache key, for steps that change files
	Cached bool   `json:"cached,omitempty"` // its layer came from the cache
}

// KeyLen is the length of a step's cache key (hex).
const KeyLen = 40

// chainKey is hash(parent key, step text, content hash).
func chainKey(parent, text, content string) string {
	h := sha256.New()
	for _, s := range []string{parent, text, content} {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))[:KeyLen]
}

// Build runs req's steps on be and stores the template. A failing step stops the build:
// nothing is stored, and the layers of the steps before it stay in the cache.
func Build(ctx context.Context, be Backend, req Request) (*Report, error) {
	start := time.Now()
	progress := req.Progress
	if progress == nil {
		progress = func(string) {}
	}
	base, err := be.Base(ctx, req.From, progress)
	if err != nil {
		return nil, err
	}
	st := state{env: slices.Clone(base.Env), user: base.User, workdir: base.Workdir, args: map[string]string{},
		labels: maps.Clone(base.Labels), runUser: base.User, cmd: base.Cmd, entrypoint: base.Entrypoint}
	if st.labels == nil {
		st.labels = map[string]string{}
	}
	key := chainKey("", base.Identity, "")
	var keys []string
	rep := &Report{Template: req.Name}
	m := len(req.Steps)
	for i, s := range req.Steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := i + 1
		progress(fmt.Sprintf("step %d/%d: %s", n, m, s))
		fail := func(err error) error {
			where := fmt.Sprintf("step %d/%d (%s)", n, m, s.Kind)
			if s.Line > 0 {
				where += fmt.Sprintf(", line %d", s.Line)
			}
			return fmt.Errorf("%s: %w", where, err)
		}
		s, err := st.expand(s)
		if err != nil {
			return nil, fail(err)
		}
		var apply func(context.Context, Sandbox) error
		content := ""
		switch s.Kind {
		case Env:
			for _, v := range s.Vars {
				st.setEnv(v.Key, v.Value)
			}
		case Arg:
			for _, v := range s.Vars {
				if _, ok := st.args[v.Key]; !ok {
					st.args[v.Key] = v.Value
				}
			}
		case Label:
			for _, v := range s.Vars {
				st.labels[v.Key] = v.Value
			}
		case User:
			st.user, st.runUser = s.Path, s.Path
		case Cmd, Entry:
			argv := s.Argv
			if argv == nil {
				argv = []string{"/bin/sh", "-c", s.Shell}
			}
			if s.Kind == Cmd {
				st.cmd = argv
			} else {
				st.entrypoint = argv
			}
		case Workdir:
			wd, _, err := ImagePath(s.Path, st.workdir)
			if err != nil {
				return nil, fail(err)
			}
			st.workdir = wd
			apply = func(ctx context.Context, sb Sandbox) error {
				return sb.Root(ctx, func(root *os.Root, hostID func(int) int) error {
					return mkdirs(root, wd, hostID(0), hostID(0))
				})
			}
		case Run:
			argv := s.Argv
			if argv == nil {
				argv = []string{"/bin/sh", "-c", s.Shell}
			}
			e := Exec{Argv: argv, Env: st.envMap(), User: st.runUser, Workdir: st.workdir, Out: lineWriter(progress)}
			if s.RunAs != "" {
				e.User = s.RunAs
			}
			if e.User == "" {
				e.User = "root"
			}
			if e.Workdir == "" {
				e.Workdir = "/"
			}
			apply = func(ctx context.Context, sb Sandbox) error {
				code, err := sb.Exec(ctx, e)
				if err != nil {
					return err
				}
				if code != 0 {
					return fmt.Errorf("%s exited with code %d: %w", s, code, errdefs.ErrInvalidArgument)
				}
				return nil
			}
		case Copy:
			plan, err := planCopy(req.Context, s, st.workdir)
			if err != nil {
				return nil, fail(err)
			}
			content = plan.hash
			apply = func(ctx context.Context, sb Sandbox) error {
				return sb.Root(ctx, func(root *os.Root, hostID func(int) int) error {
					return plan.apply(req.Context, root, hostID)
				})
			}
		default:
			return nil, fail(fmt.Errorf("unknown step kind %q: %w", s.Kind, errdefs.ErrInvalidArgument))
		}
		key = chainKey(key, s.Text(), content)
		sr := StepReport{N: n, Step: s.String()}
		if apply != nil {
			sr.Key = key
			if be.Cached(ctx, base, keys, key) {
				sr.Cached = true
				rep.Cached++
				progress(fmt.Sprintf("step %d/%d: using cached layer %s", n, m, key[:12]))
			} else {
				t := time.Now()
				if err := be.Step(ctx, base, keys, key, apply); err != nil {
					return nil, fail(err)
				}
				rep.Built++
				progress(fmt.Sprintf("step %d/%d: done in %s (layer %s)", n, m, time.Since(t).Round(time.Millisecond), key[:12]))
			}
			keys = append(keys, key)
		}
		rep.Steps = append(rep.Steps, sr)
	}
	img := Image{Env: st.env, User: st.user, Workdir: st.workdir, Labels: st.labels, Cmd: st.cmd, Entrypoint: st.entrypoint}
	if err := be.Commit(ctx, req.Name, base, keys, img); err != nil {
		return nil, err
	}
	rep.Seconds = time.Since(start).Seconds()
	progress(fmt.Sprintf("template %s is ready: %d steps, %d layers built, %d from the cache, %.1fs", req.Name, m, rep.Built, rep.Cached, rep.Seconds))
	return rep, nil
}

// state is the image configuration as the steps go.
type state struct {
	env             []string
	user, runUser   string
	workdir         string
	args, labels    map[string]string
	cmd, entrypoint []string
}

func (st *state) setEnv(k, v string) {
	for i, kv := range st.env {
		if strings.HasPrefix(kv, k+"=") {
			st.env[i] = k + "=" + v
			return
		}
	}
	st.env = append(st.env, k+"="+v)
}

func (st *state) lookup(k string) (string, bool) {
	for i := len(st.env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(st.env[i], k+"="); ok {
			return v, true
		}
	}
	v, ok := st.args[k]
	return v, ok
}

func (st *state) envMap() map[string]string {
	out := map[string]string{}
	for _, kv := range st.env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// expand substitutes $VAR and ${VAR} (from ENV and ARG so far) in the arguments of ENV,
// ARG, LABEL, WORKDIR, USER and COPY, as Docker does; RUN and CMD are left to the shell.
func (st *state) expand(s Step) (Step, error) {
	var bad error
	ex := func(v string) string {
		return os.Expand(v, func(k string) string {
			if k == "$" {
				return "$"
			}
			if strings.ContainsAny(k, ":-+?") {
				bad = fmt.Errorf("${%s}: only plain ${VAR} substitution is supported: %w", k, errdefs.ErrInvalidArgument)
			}
			v, _ := st.lookup(k)
			return v
		})
	}
	switch s.Kind {
	case Env, Arg, Label:
		vars := make([]Var, len(s.Vars))
		for i, v := range s.Vars {
			vars[i] = Var{v.Key, ex(v.Value)}
		}
		s.Vars = vars
	case Workdir, User:
		s.Path = ex(s.Path)
	case Copy:
		srcs := make([]string, len(s.Sources))
		for i, p := range s.Sources {
			srcs[i] = ex(p)
		}
		s.Sources, s.Dest, s.Chown = srcs, ex(s.Dest), ex(s.Chown)
	}
	return s, bad
}

// lineWriter turns output into progress lines.
func lineWriter(progress func(string)) io.Writer { return &lines{fn: progress} }

type lines struct {
	fn  func(string)
	buf []byte
}

func (l *lines) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := slices.Index(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > 4096 {
				l.fn("  " + string(l.buf))
				l.buf = l.buf[:0]
			}
			return len(p), nil
		}
		l.fn("  " + string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

// copyPlan is a COPY resolved against the context: what goes where, and its content hash.
type copyPlan struct {
	entries []copyEntry
	owner   string      // --chown, resolved inside the image
	mode    fs.FileMode // when not 0: the permissions of every regular file
	hash    string
}

type copyEntry struct {
	src  string // in the context
	dst  string // absolute in the image
	mode fs.FileMode
	link string
}

// maxCopyEntries bounds one COPY.
const maxCopyEntries = 200000

func planCopy(cx fs.ReadLinkFS, s Step, workdir string) (*copyPlan, error) {
	if cx == nil {
		return nil, fmt.Errorf("COPY needs a build context (--context DIR): %w", errdefs.ErrInvalidArgument)
	}
	dest, destDir, err := ImagePath(s.Dest, workdir)
	if err != nil {
		return nil, err
	}
	if len(s.Sources) > 1 {
		destDir = true
	}
	p := &copyPlan{owner: s.Chown, mode: s.Mode}
	h := sha256.New()
	add := func(e copyEntry) error {
		if len(p.entries) >= maxCopyEntries {
			return fmt.Errorf("COPY of more than %d files: %w", maxCopyEntries, errdefs.ErrInvalidArgument)
		}
		p.entries = append(p.entries, e)
		fmt.Fprintf(h, "%s\x00%s\x00%o\x00%s\x00", e.src, e.dst, e.mode, e.link)
		if e.mode.IsRegular() {
			f, err := cx.Open(e.src)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	}
	for _, src := range s.Sources {
		rel, err := ContextPath(src)
		if err != nil {
			return nil, err
		}
		fi, err := fs.Lstat(cx, rel)
		if err != nil {
			return nil, fmt.Errorf("COPY source %s: %w", src, notFound(err))
		}
		if fi.IsDir() {
			err := fs.WalkDir(cx, rel, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				sub := strings.TrimPrefix(strings.TrimPrefix(p, rel), "/")
				if rel == "." {
					sub = p
				}
				dst := dest
				if sub != "." && sub != "" {
					dst = path.Join(dest, sub)
				}
				e, err := entryOf(cx, p, dst, d)
				if err != nil {
					return err
				}
				return add(e)
			})
			if err != nil {
				return nil, fmt.Errorf("COPY source %s: %w", src, notFound(err))
			}
			continue
		}
		dst := dest
		if destDir {
			dst = path.Join(dest, path.Base(rel))
		}
		e, err := entryOf(cx, rel, dst, fs.FileInfoToDirEntry(fi))
		if err != nil {
			return nil, err
		}
		if err := add(e); err != nil {
			return nil, err
		}
	}
	p.hash = hex.EncodeToString(h.Sum(nil))
	return p, nil
}

func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	}
	return err
}

func entryOf(cx fs.ReadLinkFS, src, dst string, d fs.DirEntry) (copyEntry, error) {
	fi, err := d.Info()
	if err != nil {
		return copyEntry{}, err
	}
	e := copyEntry{src: src, dst: dst, mode: fi.Mode()}
	switch {
	case fi.Mode().IsRegular(), fi.IsDir():
	case fi.Mode()&fs.ModeSymlink != 0:
		if e.link, err = cx.ReadLink(src); err != nil {
			return copyEntry{}, err
		}
	default:
		return copyEntry{}, fmt.Errorf("COPY source %s is not a file, directory or symbolic link: %w", src, errdefs.ErrInvalidArgument)
	}
	return e, nil
}

// apply writes the plan into root: missing parent directories are made (root-owned,
// 0755), then each entry with its mode, owned by --chown (default root).
func (p *copyPlan) apply(cx fs.ReadLinkFS, root *os.Root, hostID func(int) int) error {
	uid, gid := 0, 0
	if p.owner != "" {
		var err error
		if uid, gid, err = resolveOwner(root, p.owner); err != nil {
			return err
		}
	}
	huid, hgid := hostID(uid), hostID(gid)
	for _, e := range p.entries {
		rel := strings.TrimPrefix(e.dst, "/")
		if rel == "" {
			if !e.mode.IsDir() {
				return fmt.Errorf("COPY cannot replace / by a file: %w", errdefs.ErrInvalidArgument)
			}
			continue
		}
		if err := mkdirs(root, path.Dir(e.dst), hostID(0), hostID(0)); err != nil {
			return err
		}
		switch {
		case e.mode.IsDir():
			if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
				// existing directory: keep it, take the owner and mode
			} else {
				_ = root.Remove(rel)
				if err := root.Mkdir(rel, 0o700); err != nil {
					return err
				}
			}
			if err := root.Chmod(rel, e.mode.Perm()|e.mode&(fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return err
			}
		case e.link != "":
			_ = root.Remove(rel)
			if err := root.Symlink(e.link, rel); err != nil {
				return err
			}
		default:
			if err := copyFile(cx, root, e.src, rel); err != nil {
				return err
			}
		}
		if err := root.Lchown(rel, huid, hgid); err != nil {
			return err
		}
		if e.mode.IsRegular() {
			perm := e.mode.Perm() | e.mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
			if p.mode != 0 {
				perm = p.mode.Perm()
			}
			if err := root.Chmod(rel, perm); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(cx fs.FS, root *os.Root, src, rel string) error {
	in, err := cx.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := root.Lstat(rel); err == nil && !fi.Mode().IsRegular() {
		if err := root.RemoveAll(rel); err != nil {
			return err
		}
	}
	out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkdirs makes the missing directories of dir (absolute in the image), owned by uid:gid
// on the host, mode 0755; existing ones are left as they are.
func mkdirs(root *os.Root, dir string, uid, gid int) error {
	rel := strings.TrimPrefix(path.Clean(dir), "/")
	if rel == "" {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(rel, "/") {
		cur = path.Join(cur, c)
		fi, err := root.Stat(cur)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("/%s is not a directory: %w", cur, errdefs.ErrInvalidArgument)
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := root.Mkdir(cur, 0o755); err != nil {
			return err
		}
		if err := root.Lchown(cur, uid, gid); err != nil {
			return err
		}
		if err := root.Chmod(cur, 0o755); err != nil {
			return err
		}
	}
	return nil
}
