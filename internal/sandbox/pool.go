package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// The warm pool. With Config.Warm > 0 the manager keeps that many sandboxes of the
// default kind (DefaultRuntime, the "host" template, the default disk size) created,
// started and healthy, hidden from List and Get. A Create that fits the pool's kind and
// asks for no repository claims one and hands it over instead of building a sandbox:
// its limits are set with the runtime's Update, its environment and default user with
// moat-init's POST /init, and its record takes the caller's options. Nothing but moat-init
// has run in a warm sandbox before it is handed over, so it is as fresh as a new one. The
// pool refills in the background; a daemon that stops deletes its warm sandboxes, and one
// that crashed deletes them when it starts again (they are marked Warm in the store).
type pool struct {
	mu    sync.Mutex
	ready []string
	kick  chan struct{}
}

func (p *pool) pop() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return ""
	}
	id := p.ready[0]
	p.ready = p.ready[1:]
	return id
}

func (p *pool) push(id string) {
	p.mu.Lock()
	p.ready = append(p.ready, id)
	p.mu.Unlock()
}

func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

func (p *pool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// fitsPool reports whether validated opts can be served by a warm sandbox.
func (m *Manager) fitsPool(opts CreateOptions) bool {
	return m.cfg.Warm > 0 && opts.Runtime == DefaultRuntime && opts.Template == "host" &&
		opts.Repo == "" && opts.Limits.DiskBytes == m.cfg.DefaultLimits.DiskBytes
}

// RunPool keeps the warm pool full until ctx ends, then deletes the warm sandboxes.
func (m *Manager) RunPool(ctx context.Context) {
	if m.cfg.Warm <= 0 {
		return
	}
	defer m.drainPool()
	for {
		for m.pool.size() < m.cfg.Warm && ctx.Err() == nil {
			sb, err := m.create(ctx, CreateOptions{Runtime: DefaultRuntime, Template: "host", Limits: m.cfg.DefaultLimits}, true)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.log.Error("filling the warm pool", "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Second):
				}
				continue
			}
			m.pool.push(sb.ID)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.pool.kick:
		}
		// Refill a moment after a claim, not during it: building a sandbox takes both
		// CPUs of a small host for a few hundred milliseconds, and the new owner's first
		// commands come right after its create.
		select {
		case <-ctx.Done():
			return
		case <-time.After(refillDelay):
		}
	}
}

// refillDelay is how long the pool waits after a claim before it builds a replacement.
const refillDelay = 500 * time.Millisecond

// drainPool deletes the warm sandboxes.
func (m *Manager) drainPool() {
	for id := m.pool.pop(); id != ""; id = m.pool.pop() {
		if err := m.Delete(context.Background(), id); err != nil {
			m.log.Error("deleting warm sandbox", "sandbox", id, "err", err)
		}
	}
}

// claim hands a warm sandbox over to the caller of Create, or returns nil when none is
// ready (or the hand-over failed: the caller then builds a sandbox).
func (m *Manager) claim(ctx context.Context, opts CreateOptions, tmpl Template) *Sandbox {
	id := m.pool.pop()
	if id == "" {
		return nil
	}
	m.pool.refill()
	sb, err := m.handOver(ctx, id, opts, tmpl)
	if err != nil {
		m.log.Warn("handing over a warm sandbox failed; creating one", "sandbox", id, "err", err)
		_ = m.Delete(context.WithoutCancel(ctx), id)
		return nil
	}
	return sb
}

func (m *Manager) handOver(ctx context.Context, id string, opts CreateOptions, tmpl Template) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !sb.Warm || sb.State != StateRunning {
		return nil, fmt.Errorf("warm sandbox %s is %s", id, sb.State)
	}
	if opts.Limits != sb.Limits {
		if err := m.runtimes[sb.Runtime].Update(ctx, id, opts.Limits); err != nil {
			return nil, err
		}
	}
	user, err := resolveUser(m.paths(id).rootfs, opts.User, tmpl)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]any{"envVars": mergeEnv(tmpl.Env, opts.Env), "defaultUser": user})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+id+"/init", bytes.NewReader(body))
	req.Header.Set("X-Access-Token", sb.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.envd.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("initializing moat-init: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return nil, fmt.Errorf("initializing moat-init: %s", resp.Status)
	}
	now := time.Now().UTC()
	return m.store.Update(ctx, id, func(s *Sandbox) error {
		s.Warm = false
		s.User, s.Env, s.Limits, s.Metadata = user, opts.Env, opts.Limits, opts.Metadata
		s.CreatedAt = now
		if opts.Timeout > 0 {
			exp := now.Add(opts.Timeout)
			s.ExpiresAt, s.Timeout = &exp, opts.Timeout
		}
		return nil
	})
}
