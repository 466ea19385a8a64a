package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// ConnLoad is the daemon's API latency (`ls`) with idle sandboxes, beside the same with
// every one of them holding as many connections as it may (its connection cap) to an
// upstream on loopback: the proxied connections of all sandboxes and the API share the
// daemon's descriptors, and the API must keep answering.
type ConnLoad struct {
	Sandboxes int `json:"sandboxes"`
	// Attempted connections per sandbox (its cap), and those the upstream held: the
	// daemon's budget of proxied connections admits at most its size in all.
	Attempted int `json:"conns_attempted_per_sandbox"`
	Held      int `json:"conns_held"`
	// DaemonFDs is the daemon's open descriptors under the load (it runs in this process).
	DaemonFDs int     `json:"daemon_fds_under_load"`
	Idle      Latency `json:"ls_idle"`
	Loaded    Latency `json:"ls_under_conn_load"`
	RatioP50  float64 `json:"ratio_p50"`
	RatioP99  float64 `json:"ratio_p99"`
}

// connLoad measures ConnLoad with o.ConnSandboxes runc sandboxes opening o.ConnsPerSandbox
// connections each to o.HoldName (a name the daemon pins to 127.0.0.1).
func connLoad(ctx context.Context, c *sdk.Client, o Options) (*ConnLoad, error) {
	settle(ctx, c)
	hold, err := newHolder()
	if err != nil {
		return nil, err
	}
	defer hold.close()
	var ids []string
	defer func() {
		for _, id := range ids {
			_ = c.Delete(context.WithoutCancel(ctx), id)
		}
	}()
	req := smallSandbox
	req.Runtime = "runc"
	req.Policy = &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{o.HoldName}}}}
	for range o.ConnSandboxes {
		sb, err := c.Create(ctx, req)
		if err != nil {
			return nil, err
		}
		ids = append(ids, sb.ID)
	}
	time.Sleep(2 * time.Second) // start-up work settles
	idle, err := timeList(ctx, o.Socket, o.LsRuns)
	if err != nil {
		return nil, err
	}
	// Each sandbox opens its connections in a session of its own and holds them.
	script := fmt.Sprintf(`trap "" PIPE; for i in $(seq %d); do exec {fd}<>/dev/tcp/%s/%d && echo x >&$fd; done; touch /tmp/hold.done; while :; do sleep 600; done`,
		o.ConnsPerSandbox, o.HoldName, hold.port())
	for _, id := range ids {
		line := fmt.Sprintf("echo '%s' > /tmp/hold.sh; setsid bash /tmp/hold.sh </dev/null >/dev/null 2>&1 &", script)
		if code, err := c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", line}, User: "root"}); err != nil || code != 0 {
			return nil, fmt.Errorf("starting the connections in %s: exit %d, %v", id, code, err)
		}
	}
	for _, id := range ids {
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			code, err := c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/usr/bin/test", Args: []string{"-e", "/tmp/hold.done"}, User: "root"})
			if err == nil && code == 0 {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s did not finish opening its connections", id)
			}
		}
	}
	time.Sleep(2 * time.Second) // the last admitted connections reach the upstream
	res := &ConnLoad{Sandboxes: len(ids), Attempted: o.ConnsPerSandbox, Held: hold.count(), DaemonFDs: openFDs()}
	loaded, err := timeList(ctx, o.Socket, o.LsRuns)
	if err != nil {
		return nil, err
	}
	res.Idle, res.Loaded = summarize(idle), summarize(loaded)
	if res.Idle.P50 > 0 {
		res.RatioP50 = res.Loaded.P50 / res.Idle.P50
	}
	if res.Idle.P99 > 0 {
		res.RatioP99 = res.Loaded.P99 / res.Idle.P99
	}
	return res, nil
}

// timeList times n sequential List calls, each on a new connection to the unix socket
// at sock (as `moat ls` makes one): the daemon must accept it, which needs a descriptor.
func timeList(ctx context.Context, sock string, n int) ([]time.Duration, error) {
	var ds []time.Duration
	for range n {
		c := sdk.NewUnix(sock)
		start := time.Now()
		_, err := c.List(ctx)
		d := time.Since(start)
		c.HTTPClient().CloseIdleConnections()
		if err != nil {
			return nil, fmt.Errorf("ls: %w", err)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// holder is an upstream on 127.0.0.1 that keeps every connection open until its client
// closes it, and counts them.
type holder struct {
	ln    net.Listener
	open  atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newHolder() (*holder, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &holder{ln: ln, conns: map[net.Conn]struct{}{}}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				return
			}
			h.mu.Lock()
			h.conns[c] = struct{}{}
			h.mu.Unlock()
			h.open.Add(1)
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				// A small buffer of its own: the upstream, in the daemon's process, must
				// not weigh on the daemon's garbage collection more than a connection has to.
				buf := make([]byte, 64)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				h.open.Add(-1)
				h.mu.Lock()
				delete(h.conns, c)
				h.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return h, nil
}

func (h *holder) port() int  { return h.ln.Addr().(*net.TCPAddr).Port }
func (h *holder) count() int { return int(h.open.Load()) }

func (h *holder) close() {
	h.ln.Close()
	h.mu.Lock()
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
