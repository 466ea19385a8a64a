package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
)

// The warm pools. Config.Warm names pools by runtime and template ("runc" is runc with the
// host template, "runc:debian" runc with the debian template); for each with a size > 0
// the manager keeps that many sandboxes of that kind (the default limits and disk size)
// created, started and healthy, hidden from List and Get. A Create that fits a pool's kind
// and asks for no repository claims one and hands it over instead of building a sandbox:
// its limits are set with the runtime's Update (runsc cannot change limits, so its pools
// serve default limits only), its policy with the egress boundary, its environment (the
// same as a cold create's, trust variables included) and default user with moat-init's
// POST /init, and its record takes the caller's options and becomes the caller's
// (Sandbox.Owner). Nothing but moat-init has run in a warm sandbox before it is handed
// over, so it is as fresh as a new one. A warm sandbox remembers the template it was built
// from (templateStamp): one whose template changed since (re-imported, rebuilt) is never
// handed over, it is deleted and the create goes cold.
//
// The pools refill in the background at a lower priority than real work (refillGate):
// one warm sandbox is built at a time over all pools, never while a create or a start of
// a stopped sandbox is in flight or within refillQuiet of one, and never when the data filesystem would then admit fewer
// than poolHeadroom more drives of that size. A daemon that stops deletes its warm
// sandboxes, and one that crashed deletes them when it starts again (they are marked Warm
// in the store).

// PoolKey names a warm pool: a runtime and a template.
type PoolKey struct{ Runtime, Template string }

func (k PoolKey) String() string { return k.Runtime + ":" + k.Template }

var (
	poolRuntimeRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	poolTemplateRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
)

// ParsePoolKey parses a key of Config.Warm: "RUNTIME" (the host template) or
// "RUNTIME:TEMPLATE".
func ParsePoolKey(s string) (PoolKey, error) {
	rt, tmpl, ok := strings.Cut(s, ":")
	if !ok {
		tmpl = "host"
	}
	if !poolRuntimeRE.MatchString(rt) || !poolTemplateRE.MatchString(tmpl) {
		return PoolKey{}, fmt.Errorf("warm pool %q: want RUNTIME or RUNTIME:TEMPLATE, e.g. runc:debian: %w", s, errdefs.ErrInvalidArgument)
	}
	return PoolKey{rt, tmpl}, nil
}

// ParseWarm parses the values of `moat serve --warm`: "N" (the old form: N runc sandboxes
// of the host template), "RUNTIME=N" (the host template) or "RUNTIME:TEMPLATE=N". A later
// value for the same pool replaces an earlier one; N = 0 turns a pool off. The result is
// keyed by "RUNTIME:TEMPLATE" (Config.Warm).
func ParseWarm(vals []string) (map[string]int, error) {
	out := map[string]int{}
	for _, v := range vals {
		key, num, ok := strings.Cut(v, "=")
		if !ok {
			key, num = "runc", v
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n > 1000 {
			return nil, fmt.Errorf("--warm %q: want N, RUNTIME=N or RUNTIME:TEMPLATE=N with 0 ≤ N ≤ 1000: %w", v, errdefs.ErrInvalidArgument)
		}
		k, err := ParsePoolKey(key)
		if err != nil {
			return nil, fmt.Errorf("--warm %q: %w", v, err)
		}
		out[k.String()] = n
	}
	return out, nil
}

// warmEntry is one ready warm sandbox and the stamp of the template it was built from.
type warmEntry struct{ id, stamp string }

type pool struct {
	key  PoolKey
	want int
	kick chan struct{}

	mu    sync.Mutex
	ready []warmEntry

	// Counters (PoolStats).
	hits, misses, built, stale, failed atomic.Int64
}

func (p *pool) pop() (warmEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return warmEntry{}, false
	}
	e := p.ready[0]
	p.ready = p.ready[1:]
	return e, true
}

func (p *pool) push(e warmEntry) {
	p.mu.Lock()
	p.ready = append(p.ready, e)
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

// PoolStat is one warm pool's state and counters since the daemon started.
type PoolStat struct {
	Runtime  string `json:"runtime"`
	Template string `json:"template"`
	Want     int    `json:"want"`
	Ready    int    `json:"ready"`
	// Hits are creates served from the pool, Misses fitting creates that found it empty,
	// Built warm sandboxes made, Stale ones discarded because their template changed,
	// Failed hand-overs (the create then went cold).
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	Built  int64 `json:"built"`
	Stale  int64 `json:"stale"`
	Failed int64 `json:"failed"`
}

// PoolStats reports every warm pool, sorted by runtime and template.
func (m *Manager) PoolStats() []PoolStat {
	var out []PoolStat
	for _, p := range m.pools {
		out = append(out, PoolStat{Runtime: p.key.Runtime, Template: p.key.Template, Want: p.want, Ready: p.size(),
			Hits: p.hits.Load(), Misses: p.misses.Load(), Built: p.built.Load(), Stale: p.stale.Load(), Failed: p.failed.Load()})
	}
	slices.SortFunc(out, func(a, b PoolStat) int {
		return strings.Compare(a.Runtime+":"+a.Template, b.Runtime+":"+b.Template)
	})
	return out
}

// newPools makes the pools of cfg.Warm for the runtimes present; bad keys are logged and
// skipped (the daemon checks them before).
func (m *Manager) newPools() {
	for key, n := range m.cfg.Warm {
		k, err := ParsePoolKey(key)
		if err != nil {
			m.log.Error("warm pool", "err", err)
			continue
		}
		if n > 0 && m.runtimes[k.Runtime] != nil {
			m.pools[k] = &pool{key: k, want: n, kick: make(chan struct{}, 1)}
		}
	}
	m.poolSlot = make(chan struct{}, 1)
}

// templateStamp identifies a resolved template's content: its layers (content-addressed
// directories) and image defaults.
func templateStamp(t Template) string {
	b, _ := json.Marshal(t)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// fitsPool returns the pool that can serve validated opts, or nil. A running sandbox's
// open-file and I/O limits cannot change (only its cgroup's memory, CPU and pids can):
// the warm sandbox must have the asked ones, and at least as many pids, so that pids ×
// nofile stays within the file budget; a request that did not ask for nofile (askedNofile
// false) then gets the warm sandbox's, which fits its pids.
func (m *Manager) fitsPool(opts *CreateOptions, askedNofile bool) *pool {
	p := m.pools[PoolKey{opts.Runtime, opts.Template}]
	if p == nil || opts.Repo != "" || len(opts.Users) > 0 || len(opts.Credentials) > 0 || opts.AgentBranchPrefix != "" || opts.GitProtected != "" || opts.Tier != "" || opts.GitPush != "" {
		return nil
	}
	warm, err := EffectiveLimits(Limits{}, m.cfg.DefaultLimits, m.ceilings(Caller{Operator: true}))
	if err != nil || opts.Limits.DiskBytes != warm.DiskBytes || opts.Limits.Pids > warm.Pids || askedNofile && opts.Limits.Nofile != warm.Nofile ||
		opts.Limits.IOBps != warm.IOBps || opts.Limits.IOIops != warm.IOIops {
		return nil
	}
	if TraitsOf(opts.Runtime).FixedLimits && opts.Limits != (Limits{MemoryBytes: warm.MemoryBytes, CPUs: warm.CPUs, Pids: warm.Pids,
		DiskBytes: warm.DiskBytes, Nofile: opts.Limits.Nofile, IOBps: warm.IOBps, IOIops: warm.IOIops}) {
		return nil
	}
	opts.Limits.Nofile = warm.Nofile
	return p
}

// Refill pacing (refillGate).
const (
	// refillQuiet is how long after the last create ended the pools wait before building:
	// a claim's new owner runs its first commands right after its create, and a burst of
	// creates comes in waves.
	refillQuiet = 500 * time.Millisecond
	// poolHeadroom is how many more drives of a warm sandbox's size the data filesystem
	// must still admit after the warm one is made: the pools never take the last space.
	poolHeadroom = 2
	// refillPoll is how often a waiting refill looks again while creates are in flight.
	refillPoll = 50 * time.Millisecond
	// refillNoRoom is how long a refill waits after finding too little space.
	refillNoRoom = 10 * time.Second
)

// refillWait decides whether a pool may build a warm sandbox now: not while creates are
// in flight, not within refillQuiet of the last one's end, and not when the data
// filesystem admits fewer than 1+poolHeadroom drives of the size (room < 0: any number).
// It returns 0 to build now, or how long to wait before asking again.
func refillWait(now time.Time, inflight int64, lastCreate time.Time, room int64) time.Duration {
	switch {
	case inflight > 0:
		return refillPoll
	case now.Sub(lastCreate) < refillQuiet:
		return refillQuiet - now.Sub(lastCreate)
	case room >= 0 && room < 1+poolHeadroom:
		return refillNoRoom
	}
	return 0
}

// busy marks a Create or Start in flight until the returned function is called: the pools
// do not build meanwhile (refillWait).
func (m *Manager) busy() func() {
	m.creating.Add(1)
	return func() {
		m.lastCreate.Store(time.Now().UnixNano())
		m.creating.Add(-1)
	}
}

// spaceReporter is the part of Storage the pools ask for room (storage.Store has it).
type spaceReporter interface {
	// DrivesThatFit is how many more drives of size bytes admission takes now; -1: any.
	DrivesThatFit(size int64) (int64, error)
}

// refillGate waits until the pools may build (refillWait), then takes the one building
// slot; the returned function gives it back. false: ctx ended.
func (m *Manager) refillGate(ctx context.Context) (func(), bool) {
	size := m.cfg.DefaultLimits.DiskBytes
	if l, err := EffectiveLimits(Limits{}, m.cfg.DefaultLimits, m.ceilings(Caller{Operator: true})); err == nil {
		size = l.DiskBytes
	}
	for {
		room := int64(-1)
		if sr, ok := m.storage.(spaceReporter); ok && size > 0 {
			if n, err := sr.DrivesThatFit(size); err == nil {
				room = n
			}
		}
		wait := refillWait(time.Now(), m.creating.Load(), time.Unix(0, m.lastCreate.Load()), room)
		if wait == 0 {
			select {
			case m.poolSlot <- struct{}{}:
				// Look again: a create may have started while this waited for the slot.
				if refillWait(time.Now(), m.creating.Load(), time.Unix(0, m.lastCreate.Load()), room) == 0 {
					return func() { <-m.poolSlot }, true
				}
				<-m.poolSlot
				wait = refillPoll
			case <-ctx.Done():
				return nil, false
			}
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(wait):
		}
	}
}

// KickPools tells every pool to look at its template again: a template was built,
// imported or pulled. A pool waiting for its template fills now, and one whose template
// changed deletes its warm sandboxes of the old version and builds new ones.
func (m *Manager) KickPools() {
	for _, p := range m.pools {
		p.refill()
	}
}

// dropStale deletes p's warm sandboxes that were not built from the current version of
// its template (or all, when the template is gone).
func (m *Manager) dropStale(ctx context.Context, p *pool) {
	stamp := ""
	if tmpl, err := m.storage.Template(ctx, p.key.Template); err == nil {
		stamp = templateStamp(tmpl)
	}
	p.mu.Lock()
	var stale []warmEntry
	p.ready = slices.DeleteFunc(p.ready, func(e warmEntry) bool {
		if e.stamp != stamp {
			stale = append(stale, e)
			return true
		}
		return false
	})
	p.mu.Unlock()
	for _, e := range stale {
		p.stale.Add(1)
		m.log.Info("discarding a warm sandbox of an older template", "sandbox", e.id, "pool", p.key.String())
		if err := m.Delete(context.WithoutCancel(ctx), e.id); err != nil {
			m.log.Error("deleting warm sandbox", "sandbox", e.id, "err", err)
		}
	}
}

// RunPools keeps every warm pool full until ctx ends, then deletes the warm sandboxes.
func (m *Manager) RunPools(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range m.pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.runPool(ctx, p)
		}()
	}
	wg.Wait()
}

func (m *Manager) runPool(ctx context.Context, p *pool) {
	defer m.drainPool(p)
	missing := false // the template is missing: logged once
	for {
		for p.size() < p.want && ctx.Err() == nil {
			release, ok := m.refillGate(ctx)
			if !ok {
				return
			}
			var tmpl Template
			sb, err := m.create(WithCaller(ctx, Caller{Operator: true}), CreateOptions{Runtime: p.key.Runtime, Template: p.key.Template}, true, &tmpl)
			release()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				wait := 5 * time.Second
				if errdefs.IsNotFound(err) || errdefs.IsUnavailable(err) {
					// The template does not exist (yet): look again now and then.
					wait = 30 * time.Second
					if !missing {
						m.log.Warn("the warm pool's template is not available; the pool fills once it is", "pool", p.key.String(), "err", err)
					}
					missing = true
				} else {
					m.log.Error("filling the warm pool", "pool", p.key.String(), "err", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-p.kick:
				case <-time.After(wait):
				}
				continue
			}
			missing = false
			p.built.Add(1)
			p.push(warmEntry{id: sb.ID, stamp: templateStamp(tmpl)})
		}
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			m.dropStale(ctx, p)
		}
	}
}

// drainPool deletes the warm sandboxes of p.
func (m *Manager) drainPool(p *pool) {
	for e, ok := p.pop(); ok; e, ok = p.pop() {
		if err := m.Delete(context.Background(), e.id); err != nil {
			m.log.Error("deleting warm sandbox", "sandbox", e.id, "err", err)
		}
	}
}

// claim hands a warm sandbox of p over to the caller of Create, or returns nil when none
// is ready (or the hand-over failed: the caller then builds a sandbox). A warm sandbox
// built from another version of tmpl is deleted, never handed over.
func (m *Manager) claim(ctx context.Context, p *pool, opts CreateOptions, tmpl Template) *Sandbox {
	e, ok := p.pop()
	if !ok {
		p.misses.Add(1)
		return nil
	}
	defer p.refill()
	if e.stamp != templateStamp(tmpl) {
		p.stale.Add(1)
		m.log.Info("discarding a warm sandbox of an older template", "sandbox", e.id, "pool", p.key.String())
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			m.deleteLogged(context.Background(), e.id, "a warm sandbox of an older template")
		}()
		return nil
	}
	sb, err := m.handOver(ctx, e.id, opts, tmpl)
	if err != nil {
		p.failed.Add(1)
		m.log.Warn("handing over a warm sandbox failed; creating one", "sandbox", e.id, "err", err)
		m.deleteLogged(ctx, e.id, "a warm sandbox whose hand-over failed")
		return nil
	}
	p.hits.Add(1)
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
		setOwner(ctx, s, opts) // owners.go
		s.User, s.Env, s.Limits, s.Metadata, s.Policy = user, opts.Env, opts.Limits, opts.Metadata, opts.Policy
		s.OnTimeout, s.TemplateAlias = opts.OnTimeout, opts.TemplateAlias
		s.Name, s.Labels = opts.Name, opts.Labels
		m.setLifecycle(s, opts, now)
		s.CreatedAt = now
		if opts.Timeout > 0 {
			exp := now.Add(opts.Timeout)
			s.ExpiresAt, s.Timeout = &exp, opts.Timeout
		}
		return nil
	})
}
