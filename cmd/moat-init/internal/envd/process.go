package envd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/api/envd/process/processconnect"
)

// processService implements process.Process.
type processService struct{ s *Server }

var _ processconnect.ProcessHandler = (*processService)(nil)

// Start runs a process as the request's user and streams its events: a
// start event, data events, then an end event. The request's deadline
// (connect-timeout-ms) bounds the process's life, as in envd: when it
// passes, the process group is killed, whether or not the client is still
// connected, and a connected stream ends with DeadlineExceeded. A client
// that merely disconnects leaves the process running (E2B's background
// commands, and any command a client detaches from and reconnects to later),
// unless it asked otherwise with EndWithClientHeader (endWithClient).
func (ps *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	u, err := ps.s.rpcUser(req.Header())
	if err != nil {
		return err
	}
	msg := req.Msg
	if msg.GetProcess().GetCmd() == "" {
		return invalidArgument("process.cmd is required")
	}
	r := spawnRequest{
		user:     u,
		config:   msg.GetProcess(),
		tag:      msg.Tag,
		stdin:    msg.GetStdin(),
		defaults: ps.s.defaults(),
	}
	if msg.Pty != nil {
		r.pty = msg.GetPty().GetSize()
		if r.pty == nil {
			r.pty = &pb.PTY_Size{Cols: 80, Rows: 24}
		}
	}
	p, sub, err := ps.s.spawn(r)
	if err != nil {
		return rpcError(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		kill := time.AfterFunc(time.Until(dl), func() {
			ps.s.cfg.Log.Info("deadline passed, killing process", "pid", p.pid)
			p.signal(syscall.SIGKILL)
		})
		go func() { <-p.done; kill.Stop() }()
	}
	if req.Header().Get(EndWithClientHeader) == "1" {
		go ps.endWithClient(ctx, p, r.pty != nil)
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	return ps.follow(ctx, req.Header(), p, sub, send)
}

// EndWithClientHeader, set to "1" on a Start request, ties the process to its
// stream: when the client goes away before the process ends, the process ends too
// (endWithClient). moat's own exec (sdk.Exec, `moat exec`) sets it; E2B clients do
// not, so their background commands outlive their streams as in envd.
const EndWithClientHeader = "X-Moat-End-With-Client"

// endWithClient ends process p once ctx, its Start stream's, is cancelled because
// the client went away (not at the deadline, whose own timer kills the group): a
// process on a terminal gets SIGHUP, as when a terminal hangs up (shells pass it
// on to their jobs; what a user started under nohup lives on, as it would); any
// other process group gets SIGKILL.
func (ps *processService) endWithClient(ctx context.Context, p *proc, tty bool) {
	select {
	case <-p.done:
		return
	case <-ctx.Done():
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return
	}
	sig := syscall.SIGKILL
	if tty {
		sig = syscall.SIGHUP
	}
	ps.s.cfg.Log.Info("client went away, ending process", "pid", p.pid, "signal", sig)
	p.signal(sig)
}

// Connect attaches to a running process: a start event, then its further
// output and its end. The deadline ends only the stream.
func (ps *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.subscribe()
	if sub == nil {
		return notFound("process with pid %d has ended", p.pid)
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	return ps.follow(ctx, req.Header(), p, sub, send)
}

// follow streams a process's events to one client until the end event, the
// client's departure or its deadline.
func (ps *processService) follow(ctx context.Context, h http.Header, p *proc, sub *subscriber,
	send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	var tick <-chan time.Time
	if d := keepaliveInterval(h); d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
					return deadlineExceeded(p)
				}
				return nil
			}
		case <-tick:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return deadlineExceeded(p)
			}
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

func deadlineExceeded(p *proc) error {
	return connect.NewError(connect.CodeDeadlineExceeded, errorf("process %d: deadline exceeded", p.pid))
}

// List returns the running processes started through Start.
func (ps *processService) List(context.Context, *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	procs := ps.s.procs.list()
	out := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		out.Processes = append(out.Processes, &pb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag})
	}
	return connect.NewResponse(out), nil
}

// SendInput writes to a process's stdin or terminal.
func (ps *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	dl, _ := ctx.Deadline()
	if err := writeInput(p, req.Msg.GetInput(), dl); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func writeInput(p *proc, in *pb.ProcessInput, deadline time.Time) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return p.writeInput(v.Stdin, false, deadline)
	case *pb.ProcessInput_Pty:
		return p.writeInput(v.Pty, true, deadline)
	default:
		return invalidArgument("input must be stdin or pty")
	}
}

// StreamInput writes the inputs of one client stream in order: a start
// event selecting the process, then data events.
func (ps *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := ps.s.procs.find(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, failedPrecondition("data before start event")
			}
			dl, _ := ctx.Deadline()
			if err := writeInput(p, ev.Data.GetInput(), dl); err != nil {
				return nil, rpcError(err)
			}
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// CloseStdin closes a process's stdin pipe.
func (ps *processService) CloseStdin(_ context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process's process group.
func (ps *processService) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case pb.Signal_SIGNAL_SIGINT:
		sig = syscall.SIGINT
	default:
		return nil, invalidArgument("unsupported signal %v", req.Msg.GetSignal())
	}
	p.signal(sig)
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// Update resizes a process's terminal.
func (ps *processService) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := ps.s.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := p.resize(size.GetCols(), size.GetRows()); err != nil {
			return nil, rpcError(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
