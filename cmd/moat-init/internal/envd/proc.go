package envd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// defaultPath is PATH for processes unless MOAT_ENV or the request sets it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// drainGrace is how long output is still collected after a process exits,
// for data left in pipes. Output of background children that keep the
// pipes open past it is dropped.
const drainGrace = 500 * time.Millisecond

// readChunk is the largest data event.
const readChunk = 16 << 10

// processTable holds the processes started by this server, by pid, until
// their end event has been published.
type processTable struct {
	mu    sync.Mutex
	procs map[uint32]*proc
}

func newProcessTable() *processTable {
	return &processTable{procs: make(map[uint32]*proc)}
}

func (t *processTable) add(p *proc) {
	t.mu.Lock()
	t.procs[p.pid] = p
	t.mu.Unlock()
}

func (t *processTable) remove(p *proc) {
	t.mu.Lock()
	if t.procs[p.pid] == p {
		delete(t.procs, p.pid)
	}
	t.mu.Unlock()
}

// find returns the process sel names.
func (t *processTable) find(sel *pb.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p := t.procs[s.Pid]; p != nil {
			return p, nil
		}
		return nil, notFound("process with pid %d not found", s.Pid)
	case *pb.ProcessSelector_Tag:
		var found *proc
		for _, p := range t.procs {
			// The most recent process with the tag wins.
			if p.tag != nil && *p.tag == s.Tag && (found == nil || p.started.After(found.started)) {
				found = p
			}
		}
		if found != nil {
			return found, nil
		}
		return nil, notFound("process with tag %q not found", s.Tag)
	default:
		return nil, invalidArgument("no process selected")
	}
}

func (t *processTable) list() []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*proc, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// proc is one started process and the streams that follow it.
type proc struct {
	pid     uint32
	tag     *string
	config  *pb.ProcessConfig
	started time.Time

	// inMu serializes writes to and closing of stdin and the terminal.
	inMu  sync.Mutex
	stdin *os.File // write end of the stdin pipe; nil when closed or absent
	pty   *os.File // terminal master; nil without a terminal
	// outputs are the read ends the pumps drain (stdout and stderr, or the
	// terminal master).
	outputs []*os.File

	exited  chan struct{} // closed by the reaper callback
	status  syscall.WaitStatus
	pumping sync.WaitGroup

	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	ended bool
}

// subscriber is one stream following a process.
type subscriber struct {
	ch   chan *pb.ProcessEvent
	gone chan struct{}
	once sync.Once
}

// subscribe adds a stream, or returns nil when the process has ended.
func (p *proc) subscribe() *subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	s := &subscriber{ch: make(chan *pb.ProcessEvent, 32), gone: make(chan struct{})}
	p.subs[s] = struct{}{}
	return s
}

// unsubscribe removes a stream; pending sends to it are abandoned.
func (p *proc) unsubscribe(s *subscriber) {
	s.once.Do(func() { close(s.gone) })
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// publish delivers ev to every stream, waiting for slow ones: output is
// back-pressured onto the process, not dropped, while a stream follows it.
func (p *proc) publish(ev *pb.ProcessEvent, end bool) {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.ended = end
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// pump publishes what f yields as data events until f fails or closes.
func (p *proc) pump(f *os.File, wrap func([]byte) *pb.ProcessEvent_DataEvent) {
	defer p.pumping.Done()
	buf := make([]byte, readChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			data := make([]byte, n)
			copy(data, buf[:n])
			p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(data)}}, false)
		}
		if err != nil {
			// io.EOF for pipes; EIO once a terminal's last slave closes;
			// os.ErrClosed or a deadline after drainGrace.
			return
		}
	}
}

// finish waits for the exit status and the output, publishes the end event
// and forgets the process.
func (p *proc) finish(t *processTable) {
	<-p.exited
	drained := make(chan struct{})
	go func() { p.pumping.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		for _, f := range p.outputs {
			_ = f.SetReadDeadline(time.Now())
		}
		<-drained
	}
	for _, f := range p.outputs {
		f.Close()
	}
	p.inMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.pty = nil
	p.inMu.Unlock()

	t.remove(p)
	p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: endEvent(p.status)}}, true)
}

// endEvent describes a wait status the way Go's os.ProcessState does, which
// is what E2B's envd reports.
func endEvent(ws syscall.WaitStatus) *pb.ProcessEvent_EndEvent {
	switch {
	case ws.Exited():
		return &pb.ProcessEvent_EndEvent{
			ExitCode: int32(ws.ExitStatus()),
			Exited:   true,
			Status:   fmt.Sprintf("exit status %d", ws.ExitStatus()),
		}
	case ws.Signaled():
		status := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			status += " (core dumped)"
		}
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: status}
	default:
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: fmt.Sprintf("wait status %#x", int(ws))}
	}
}

// writeInput writes data to the process's stdin, or to its terminal when
// toPTY is set.
func (p *proc) writeInput(data []byte, toPTY bool) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	f := p.stdin
	if toPTY {
		f = p.pty
		if f == nil {
			return failedPrecondition("process %d has no terminal", p.pid)
		}
	} else if f == nil {
		if p.pty != nil {
			return failedPrecondition("process %d has a terminal: send pty input", p.pid)
		}
		return failedPrecondition("stdin of process %d is not open", p.pid)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing input of process %d: %w", p.pid, err)
	}
	return nil
}

// closeStdin closes the process's stdin pipe.
func (p *proc) closeStdin() error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.pty != nil {
		return failedPrecondition("process %d has a terminal: send Ctrl-D (0x04) instead", p.pid)
	}
	if p.stdin == nil {
		return failedPrecondition("stdin of process %d is not open", p.pid)
	}
	err := p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return fmt.Errorf("closing stdin of process %d: %w", p.pid, err)
	}
	return nil
}

// signal sends sig to the process group unless the process has been
// reaped (its pid may then belong to someone else).
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		// Reaped: the pid may be reused; the end event is on its way.
	default:
		linux.KillGroup(int(p.pid), sig)
	}
}

func (p *proc) resize(cols, rows uint32) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.pty == nil {
		return failedPrecondition("process %d has no terminal", p.pid)
	}
	if cols == 0 || rows == 0 || cols > 0xffff || rows > 0xffff {
		return invalidArgument("invalid terminal size %dx%d", cols, rows)
	}
	return linux.SetWinsize(p.pty, uint16(cols), uint16(rows))
}

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

	p := &proc{
		tag:     r.tag,
		config:  cfg,
		started: time.Now(),
		exited:  make(chan struct{}),
		subs:    make(map[*subscriber]struct{}),
	}
	// child holds the child's ends, closed here once it has them.
	var child []*os.File
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	fail := func(err error) (*proc, *subscriber, error) {
		for _, f := range p.outputs {
			f.Close()
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		return nil, nil, err
	}

	attr := linux.ExecAttr{
		Path: path,
		Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env:  envList(env),
		Dir:  dir,
	}
	if os.Geteuid() == 0 || r.user.UID != uint32(os.Geteuid()) {
		cred := credOf(r.user)
		attr.Cred = &cred
	}
	var wraps []func([]byte) *pb.ProcessEvent_DataEvent
	if r.pty != nil {
		cols, rows := r.pty.GetCols(), r.pty.GetRows()
		if cols == 0 || rows == 0 || cols > 0xffff || rows > 0xffff {
			return fail(invalidArgument("invalid terminal size %dx%d", cols, rows))
		}
		master, slave, err := linux.OpenPTY(uint16(cols), uint16(rows))
		if err != nil {
			return fail(err)
		}
		child = append(child, slave)
		p.pty = master
		p.outputs = []*os.File{master}
		wraps = append(wraps, func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
		})
		attr.Files = []*os.File{slave, slave, slave}
		attr.Setctty = true
	} else {
		var stdin *os.File
		if r.stdin {
			pr, pw, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("creating stdin pipe: %w", err))
			}
			child = append(child, pr)
			p.stdin, stdin = pw, pr
		} else {
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				return fail(fmt.Errorf("opening %s: %w", os.DevNull, err))
			}
			child = append(child, devnull)
			stdin = devnull
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("creating stdout pipe: %w", err))
		}
		child = append(child, outW)
		p.outputs = append(p.outputs, outR)
		errR, errW, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("creating stderr pipe: %w", err))
		}
		child = append(child, errW)
		p.outputs = append(p.outputs, errR)
		wraps = append(wraps,
			func(b []byte) *pb.ProcessEvent_DataEvent {
				return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
			},
			func(b []byte) *pb.ProcessEvent_DataEvent {
				return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
			})
		attr.Files = []*os.File{stdin, outW, errW}
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
	for i, f := range p.outputs {
		p.pumping.Add(1)
		go p.pump(f, wraps[i])
	}
	go p.finish(s.procs)
	s.cfg.Log.Info("started process", "pid", p.pid, "cmd", cfg.GetCmd(), "user", r.user.Name,
		"pty", r.pty != nil, "tagged", r.tag != nil)
	return p, sub, nil
}
