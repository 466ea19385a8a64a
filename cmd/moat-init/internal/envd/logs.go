package envd

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	pb "github.com/moatdev/moat/api/envd/process"
	v1 "github.com/moatdev/moat/api/v1"
)

// Process output logs (`moat logs`, GET /moat/logs): moat-init keeps the tail of every
// started process's output, so that a background process (E2B's commands.run with
// background: true, whose client went away) can be read later. Bounded: maxLogBytes per
// process, maxLogs processes (an ended one makes room for a new one; while maxLogs are all
// running, a new process is not logged).

const (
	maxLogBytes = 64 << 10
	maxLogs     = 64
)

// procLog is one process's kept output. Safe for concurrent use; a nil *procLog (a process
// not logged) ignores writes.
type procLog struct {
	pid     uint32
	tag     string
	cmd     string
	args    []string
	started time.Time

	mu     sync.Mutex
	chunks []logChunk // oldest first; sizes add up to size ≤ max
	size   int
	max    int
	total  int64 // bytes ever written
	end    *pb.ProcessEvent_EndEvent
	wake   chan struct{} // closed and replaced at every write and at the end
}

// logChunk is output of one stream; off is the offset of data[0] in the process's output.
type logChunk struct {
	stream string
	data   []byte
	off    int64
}

func newProcLog(pid uint32, tag, cmd string, args []string, max int) *procLog {
	return &procLog{pid: pid, tag: tag, cmd: cmd, args: args, started: time.Now(), max: max, wake: make(chan struct{})}
}

// write keeps the output of one data event (d's slice is not modified later: pump makes a
// new one per read), dropping the oldest output beyond l.max.
func (l *procLog) write(d *pb.ProcessEvent_DataEvent) {
	if l == nil || d == nil {
		return
	}
	var stream string
	var data []byte
	switch o := d.GetOutput().(type) {
	case *pb.ProcessEvent_DataEvent_Stdout:
		stream, data = "stdout", o.Stdout
	case *pb.ProcessEvent_DataEvent_Stderr:
		stream, data = "stderr", o.Stderr
	case *pb.ProcessEvent_DataEvent_Pty:
		stream, data = "pty", o.Pty
	}
	if len(data) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.chunks = append(l.chunks, logChunk{stream: stream, data: data, off: l.total})
	l.total += int64(len(data))
	l.size += len(data)
	for l.size > l.max {
		excess := l.size - l.max
		if first := &l.chunks[0]; len(first.data) <= excess {
			l.size -= len(first.data)
			l.chunks = l.chunks[1:]
		} else {
			first.data = first.data[excess:]
			first.off += int64(excess)
			l.size -= excess
		}
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// finish records the process's end.
func (l *procLog) finish(end *pb.ProcessEvent_EndEvent) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.end = end
	close(l.wake)
	l.wake = make(chan struct{})
}

// since returns the kept output from offset from on, where it ends, whether the process has
// ended (after this output), and a channel closed at the next change.
func (l *procLog) since(from int64) (out []logChunk, next int64, ended bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.chunks {
		end := c.off + int64(len(c.data))
		if end <= from {
			continue
		}
		if c.off < from {
			c.data, c.off = c.data[from-c.off:], from
		}
		out = append(out, c)
	}
	return out, l.total, l.end != nil, l.wake
}

// info describes the process.
func (l *procLog) info() v1.ProcessLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := v1.ProcessLog{PID: l.pid, Tag: l.tag, Cmd: l.cmd, Args: l.args, Started: l.started.UTC(), Running: l.end == nil,
		Bytes: l.total, Dropped: l.total - int64(l.size)}
	if l.end != nil {
		code := l.end.GetExitCode()
		out.ExitCode, out.Status = &code, l.end.GetStatus()
	}
	return out
}

func (l *procLog) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end != nil
}

// logRegistry holds the procLogs, oldest first.
type logRegistry struct {
	mu   sync.Mutex
	logs []*procLog
	max  int // most logs kept
	size int // bytes kept per process
}

func newLogRegistry() *logRegistry { return &logRegistry{max: maxLogs, size: maxLogBytes} }

// add starts the log of process p; nil when r is full of running processes.
func (r *logRegistry) add(p *proc) *procLog {
	var tag string
	if p.tag != nil {
		tag = *p.tag
	}
	l := newProcLog(p.pid, tag, p.config.GetCmd(), p.config.GetArgs(), r.size)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.logs) >= r.max {
		i := 0
		for i < len(r.logs) && !r.logs[i].ended() {
			i++
		}
		if i == len(r.logs) {
			return nil
		}
		r.logs = append(r.logs[:i], r.logs[i+1:]...)
	}
	r.logs = append(r.logs, l)
	return l
}

// find returns the newest log of pid (when not 0) or tag.
func (r *logRegistry) find(pid uint32, tag string) *procLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.logs) - 1; i >= 0; i-- {
		if l := r.logs[i]; (pid != 0 && l.pid == pid) || (pid == 0 && tag != "" && l.tag == tag) {
			return l
		}
	}
	return nil
}

func (r *logRegistry) list() []v1.ProcessLog {
	r.mu.Lock()
	logs := append([]*procLog(nil), r.logs...)
	r.mu.Unlock()
	out := make([]v1.ProcessLog, 0, len(logs))
	for _, l := range logs {
		out = append(out, l.info())
	}
	return out
}

// serveLogs serves GET /moat/logs: without pid or tag, the logged processes (JSON array of
// v1.ProcessLog); with ?pid=N or ?tag=T, that process's kept output as NDJSON v1.LogChunk
// lines, ending with an End line once it has ended; follow=1 keeps the stream open until it
// ends (or the client leaves).
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var pid uint32
	if v := q.Get("pid"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			writeError(w, http.StatusBadRequest, errors.New("pid: want a process id"))
			return
		}
		pid = uint32(n)
	}
	tag := q.Get("tag")
	if pid == 0 && tag == "" {
		writeJSON(w, http.StatusOK, s.logs.list())
		return
	}
	l := s.logs.find(pid, tag)
	if l == nil {
		writeError(w, http.StatusNotFound, errors.New("no logged process with that pid or tag (moat-init keeps the output of the 64 most recent processes)"))
		return
	}
	follow := q.Get("follow") == "1"
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	var from int64
	for {
		chunks, next, ended, wake := l.since(from)
		for _, c := range chunks {
			if c.off > from {
				_ = enc.Encode(v1.LogChunk{Dropped: c.off - from})
			}
			if err := enc.Encode(v1.LogChunk{Stream: c.stream, Data: c.data}); err != nil {
				return
			}
			from = c.off + int64(len(c.data))
		}
		if next > from {
			_ = enc.Encode(v1.LogChunk{Dropped: next - from})
			from = next
		}
		if ended {
			info := l.info()
			_ = enc.Encode(v1.LogChunk{End: &info})
			return
		}
		if !follow {
			return
		}
		_ = rc.Flush()
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}
