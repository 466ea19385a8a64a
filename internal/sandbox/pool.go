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

	"github.com/moatdev/moat/internal/gitgate"
)

// The warm pools. For each runtime with Config.Warm[runtime] > 0 the manager keeps that
// many sandboxes of the default kind (that runtime, the "host" template, the default disk
// size) created, started and healthy, hidden from List and Get. A Create that fits a pool's
// kind and asks for no repository claims one and hands it over instead of building a
// sandbox: its limits are set with the runtime's Update (runsc cannot change limits, so its
// pool serves default limits only), its policy with the egress boundary, its environment
// (the same as a cold create's, trust variables included) and default user with
// moat-init's POST /init, and its record takes the caller's options and becomes the
// caller's (Sandbox.Owner). Nothing but moat-init has run in a warm sandbox before it is
// handed over, so it is as fresh as a new one. The pool refills in the background; a daemon
// that stops deletes its warm sandboxes, and one that crashed deletes them when it starts
// again (they are marked Warm in the store).
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

// fitsPool reports whether validated opts can be served by a warm sandbox. A running
// sandbox's open-file and I/O limits cannot change (only its cgroup's memory, CPU and pids
// can): the warm sandbox must have the asked ones, and at least as many pids, so that pids
// × nofile stays within the file budget; a request that did not ask for nofile
// (askedNofile false) then gets the warm sandbox's, which fits its pids.
func (m *Manager) fitsPool(opts *CreateOptions, askedNofile bool) bool {
	if m.pools[opts.Runtime] == nil || opts.Template != "host" || opts.Repo != "" || len(opts.Credentials) > 0 || opts.AgentBranchPrefix != "" || opts.GitProtected != "" {
		return false
	}
	warm, err := EffectiveLimits(Limits{}, m.cfg.DefaultLimits, m.ceilings(Caller{Operator: true}))
	if err != nil || opts.Limits.DiskBytes != warm.DiskBytes || opts.Limits.Pids > warm.Pids || askedNofile && opts.Limits.Nofile != warm.Nofile ||
		opts.Limits.IOBps != warm.IOBps || opts.Limits.IOIops != warm.IOIops {
		return false
	}
	if opts.Runtime == "runsc" && opts.Limits != (Limits{MemoryBytes: warm.MemoryBytes, CPUs: warm.CPUs, Pids: warm.Pids,
		DiskBytes: warm.DiskBytes, Nofile: opts.Limits.Nofile, IOBps: warm.IOBps, IOIops: warm.IOIops}) {
		return false
	}
	opts.Limits.Nofile = warm.Nofile
	return true
}

// RunPools keeps every warm pool full until ctx ends, then deletes the warm sandboxes.
func (m *Manager) RunPools(ctx context.Context) {
	var wg sync.WaitGroup
	for rt, n := range m.cfg.Warm {
		p := m.pools[rt]
		if n <= 0 || p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.runPool(ctx, rt, n, p)
		}()
	}
	wg.Wait()
}

func (m *Manager) runPool(ctx context.Context, rt string, n int, p *pool) {
	defer m.drainPool(p)
	for {
		for p.size() < n && ctx.Err() == nil {
			sb, err := m.create(WithCaller(ctx, Caller{Operator: true}), CreateOptions{Runtime: rt, Template: "host"}, true)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.log.Error("filling the warm pool", "runtime", rt, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Second):
				}
				continue
			}
			p.push(sb.ID)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
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

// drainPool deletes the warm sandboxes of p.
func (m *Manager) drainPool(p *pool) {
	for id := p.pop(); id != ""; id = p.pop() {
		if err := m.Delete(context.Background(), id); err != nil {
			m.log.Error("deleting warm sandbox", "sandbox", id, "err", err)
		}
	}
}

// claim hands a warm sandbox over to the caller of Create, or returns nil when none is
// ready (or the hand-over failed: the caller then builds a sandbox).
func (m *Manager) claim(ctx context.Context, opts CreateOptions, tmpl Template) *Sandbox {
	p := m.pools[opts.Runtime]
	id := p.pop()
	if id == "" {
		return nil
	}
	p.refill()
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
	// Attaching an attached sandbox sets its policy and returns its CA as for a cold
	// create; moat-init installed that same CA (one per sandbox ID) when it started.
	owned := &Sandbox{Policy: opts.Policy}
	caPEM, err := m.egress.Attach(id, owned.EgressPolicy(), nil, GitSettings{Prefix: gitgate.DefaultPrefix(id)})
	if err != nil {
		return nil, err
	}
	// The environment a cold create gives moat-init, trust variables included.
	env := credentialEnv(mergeEnv(tmpl.Env, opts.Env), nil, caPEM != "")
	body, _ := json.Marshal(map[string]any{"envVars": env, "defaultUser": user})
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
		s.Owner = CallerFrom(ctx).Owner()
		s.User, s.Env, s.Limits, s.Metadata, s.Policy = user, opts.Env, opts.Limits, opts.Metadata, opts.Policy
		s.OnTimeout, s.TemplateAlias = opts.OnTimeout, opts.TemplateAlias
		m.setLifecycle(s, opts, now)
		s.CreatedAt = now
		if opts.Timeout > 0 {
			exp := now.Add(opts.Timeout)
			s.ExpiresAt, s.Timeout = &exp, opts.Timeout
		}
		return nil
	})
}
