package envd

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	pb "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
)

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
	// oomKills reads the sandbox's OOM-kill counter (nil: unknown); oomBefore is its
	// value when the process started.
	oomKills  func() uint64
	oomBefore uint64

	// inMu guards stdin and pty; writeMu serializes input writes.
	inMu    sync.Mutex
	writeMu sync.Mutex
	stdin   *os.File // write end of the stdin pipe; nil when closed or absent
	pty     *os.File // terminal master; nil without a terminal or once ended
	// outputs are the read ends the pumps drain (stdout and stderr, or the
	// terminal master).
	outputs []*os.File
	// out keeps the tail of the output (logs.go); nil: not logged.
	out *procLog

	exited  chan struct{} // closed by the reaper callback
	done    chan struct{} // closed once the end event is published
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
			d := wrap(data)
			p.out.write(d)
			p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}, false)
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
func (p *proc) finish(t *processTable, log *slog.Logger) {
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
	stdin := p.stdin
	p.stdin, p.pty = nil, nil
	p.inMu.Unlock()
	if stdin != nil {
		stdin.Close()
	}

	t.remove(p)
	end := endEvent(p.status, p.oomKilled())
	p.out.finish(end)
	log.Debug("process ended", "pid", p.pid, "status", end.GetStatus())
	p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}, true)
	close(p.done)
}

// oomKilled says whether the process, which has ended, was killed by SIGKILL while the
// sandbox's OOM-kill counter grew: the kernel's OOM killer chose it (or, rarely, killed
// another process of the sandbox while something else SIGKILLed this one).
func (p *proc) oomKilled() bool {
	return p.status.Signaled() && p.status.Signal() == syscall.SIGKILL &&
		p.oomKills != nil && p.oomKills() > p.oomBefore
}

// OOMKilledReason is the error of the end event of a process the OOM killer ended.
const OOMKilledReason = "killed by the OOM killer: the sandbox reached its memory limit"

// endEvent describes a wait status the way Go's os.ProcessState does, which
// is what E2B's envd reports. A process that did not exit with 0 also gets
// the status as its error (envd sets the error of exec's Wait): the E2B SDK
// shows it as CommandExitError's message. A process the OOM killer ended
// (oomKilled) has OOMKilledReason as its error instead, after its status.
func endEvent(ws syscall.WaitStatus, oomKilled bool) *pb.ProcessEvent_EndEvent {
	var end *pb.ProcessEvent_EndEvent
	switch {
	case ws.Exited():
		end = &pb.ProcessEvent_EndEvent{
			ExitCode: int32(ws.ExitStatus()),
			Exited:   true,
			Status:   fmt.Sprintf("exit status %d", ws.ExitStatus()),
		}
	case ws.Signaled():
		status := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			status += " (core dumped)"
		}
		end = &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: status}
	default:
		end = &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: fmt.Sprintf("wait status %#x", int(ws))}
	}
	if end.ExitCode != 0 {
		msg := end.Status
		if oomKilled {
			msg += ": " + OOMKilledReason
		}
		end.Error = &msg
	}
	return end
}

// input returns the file input goes to: stdin, or the terminal when toPTY.
func (p *proc) input(toPTY bool) (*os.File, error) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if toPTY {
		if p.pty == nil {
			return nil, failedPrecondition("process %d has no terminal", p.pid)
		}
		return p.pty, nil
	}
	if p.stdin == nil {
		if p.pty != nil {
			return nil, failedPrecondition("process %d has a terminal: send pty input", p.pid)
		}
		return nil, failedPrecondition("stdin of process %d is not open", p.pid)
	}
	return p.stdin, nil
}

// writeInput writes data to the process's stdin, or to its terminal when
// toPTY is set. Writes are serialized; one that blocks on a full pipe ends
// at deadline (when not zero), or when stdin is closed.
func (p *proc) writeInput(data []byte, toPTY bool, deadline time.Time) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	f, err := p.input(toPTY)
	if err != nil {
		return err
	}
	_ = f.SetWriteDeadline(deadline)
	_, err = f.Write(data)
	_ = f.SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("writing input of process %d: %w", p.pid, err)
	}
	return nil
}

// closeStdin closes the process's stdin pipe, ending a pending write.
func (p *proc) closeStdin() error {
	p.inMu.Lock()
	f := p.stdin
	p.stdin = nil
	hasPTY := p.pty != nil
	p.inMu.Unlock()
	switch {
	case hasPTY:
		return failedPrecondition("process %d has a terminal: send Ctrl-D (0x04) instead", p.pid)
	case f == nil:
		return failedPrecondition("stdin of process %d is not open", p.pid)
	}
	if err := f.Close(); err != nil {
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
