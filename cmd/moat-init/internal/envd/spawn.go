package envd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	pb "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// defaultPath is PATH for processes unless MOAT_ENV or the request sets it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spawnRequest is a validated StartRequest for one user.
type spawnRequest struct {
	user     *users.User
	config   *pb.ProcessConfig
	tag      *string
	pty      *pb.PTY_Size // nil: no terminal
	stdin    bool
	defaults map[string]string
}

// processEnv builds a process's environment: the user's identity and
// PATH, then the sandbox defaults, then the request's own variables.
func processEnv(u *users.User, defaults, request map[string]string) map[string]string {
	shell := u.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	env := map[string]string{
		"HOME":    homeOf(u),
		"USER":    u.Name,
		"LOGNAME": u.Name,
		"PATH":    defaultPath,
		"SHELL":   shell,
	}
	for k, v := range defaults {
		env[k] = v
	}
	for k, v := range request {
		env[k] = v
	}
	return env
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			continue
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lookPath finds file like a shell would with the given PATH. Names with a
// slash are used as they are.
func lookPath(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: executable file not found in $PATH: %w", file, os.ErrNotExist)
}

// spawn starts a process and returns it with the first subscriber (the
// Start stream) attached, so no output is missed.
func (s *Server) spawn(r spawnRequest) (*proc, *subscriber, error) {
	cfg := r.config
	env := processEnv(r.user, r.defaults, cfg.GetEnvs())

	dir := homeOf(r.user)
	if cfg.Cwd != nil {
		var err error
		if dir, err = resolvePath(cfg.GetCwd(), r.user); err != nil {
			return nil, nil, err
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, nil, invalidArgument("cwd %q is not a directory", dir)
		}
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = "/"
	}

	path, err := lookPath(cfg.GetCmd(), env["PATH"])
	if err != nil {
		return nil, nil, invalidArgument("%v", err)
	}
	argv0 := cfg.GetCmd()
	if sh := shellFallback(path, isExecutable); sh != path {
		path, argv0 = sh, sh
	}

	p := &proc{
		oomKills: s.cfg.OOMKills,
		tag:      r.tag,
		config:   cfg,
		started:  time.Now(),
		exited:   make(chan struct{}),
		done:     make(chan struct{}),
		subs:     make(map[*subscriber]struct{}),
	}
	st, err := p.openStdio(r.pty, r.stdin)
	// The child's ends are closed here once it has its copies.
	defer st.closeChild()
	fail := func(err error) (*proc, *subscriber, error) {
		p.closeOurEnds()
		return nil, nil, err
	}
	if err != nil {
		return fail(err)
	}

	attr := linux.ExecAttr{
		Path:    path,
		Args:    append([]string{argv0}, cfg.GetArgs()...),
		Env:     envList(env),
		Dir:     dir,
		Files:   st.files,
		Setctty: r.pty != nil,
	}
	if os.Geteuid() == 0 || r.user.UID != uint32(os.Geteuid()) {
		cred := credOf(r.user)
		attr.Cred = &cred
	}

	if p.oomKills != nil {
		p.oomBefore = p.oomKills()
	}
	sub := p.subscribe()
	_, err = s.cfg.Reaper.Spawn(func() (int, error) {
		pid, err := linux.ForkExec(attr)
		if err != nil {
			return 0, err
		}
		p.pid = uint32(pid)
		s.procs.add(p)
		return pid, nil
	}, func(ws syscall.WaitStatus) {
		p.status = ws
		close(p.exited)
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) ||
			errors.Is(err, syscall.ENOEXEC) {
			return fail(invalidArgument("%v", err))
		}
		return fail(err)
	}
	p.out = s.logs.add(p)
	for i, f := range p.outputs {
		p.pumping.Add(1)
		go p.pump(f, st.wraps[i])
	}
	go p.finish(s.procs, s.cfg.Log)
	s.cfg.Log.Info("started process", "pid", p.pid, "cmd", cfg.GetCmd(), "user", r.user.Name,
		"pty", r.pty != nil, "tagged", r.tag != nil)
	return p, sub, nil
}

// stdio is what openStdio prepared for the child.
type stdio struct {
	// child are the child's ends, to close once it has started.
	child []*os.File
	// files become the child's descriptors 0, 1 and 2.
	files []*os.File
	// wraps turn what each of proc.outputs yields into a data event.
	wraps []func([]byte) *pb.ProcessEvent_DataEvent
}

func (st *stdio) closeChild() {
	for _, f := range st.child {
		f.Close()
	}
}

func stdoutEvent(b []byte) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
}

func stderrEvent(b []byte) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
}

func ptyEvent(b []byte) *pb.ProcessEvent_DataEvent {
	return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
}

// openStdio creates the process's standard streams: a terminal of the
// given size for all three when size is set; otherwise pipes for stdout
// and stderr, and for stdin a pipe when withStdin, else /dev/null. Our
// ends go into p; on error the caller closes them with closeOurEnds.
func (p *proc) openStdio(size *pb.PTY_Size, withStdin bool) (*stdio, error) {
	st := &stdio{}
	if size != nil {
		cols, rows := size.GetCols(), size.GetRows()
		if cols == 0 || rows == 0 || cols > 0xffff || rows > 0xffff {
			return st, invalidArgument("invalid terminal size %dx%d", cols, rows)
		}
		master, slave, err := linux.OpenPTY(uint16(cols), uint16(rows))
		if err != nil {
			return st, err
		}
		st.child = append(st.child, slave)
		st.files = []*os.File{slave, slave, slave}
		p.pty = master
		p.outputs = []*os.File{master}
		st.wraps = append(st.wraps, ptyEvent)
		return st, nil
	}

	if withStdin {
		r, w, err := os.Pipe()
		if err != nil {
			return st, fmt.Errorf("creating stdin pipe: %w", err)
		}
		st.child = append(st.child, r)
		st.files = append(st.files, r)
		p.stdin = w
	} else {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return st, fmt.Errorf("opening %s: %w", os.DevNull, err)
		}
		st.child = append(st.child, devnull)
		st.files = append(st.files, devnull)
	}
	for _, wrap := range []func([]byte) *pb.ProcessEvent_DataEvent{stdoutEvent, stderrEvent} {
		r, w, err := os.Pipe()
		if err != nil {
			return st, fmt.Errorf("creating output pipe: %w", err)
		}
		st.child = append(st.child, w)
		st.files = append(st.files, w)
		p.outputs = append(p.outputs, r)
		st.wraps = append(st.wraps, wrap)
	}
	return st, nil
}

// closeOurEnds closes our ends of the standard streams of a process that
// did not start.
func (p *proc) closeOurEnds() {
	for _, f := range p.outputs {
		f.Close()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}
