package apiserver

// The E2B-compatible control plane: the REST API of E2B's cloud as the e2b SDK (npm
// e2b@2.51.x) calls it, served from the same route table as moat's native API. Errors are
// E2B-shaped, {"code": <status>, "message": "..."}: the SDK reads "code" to tell a missing
// sandbox (404) or an already paused one (409) from other failures.

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// E2BConfig configures the E2B-compatible API.
type E2BConfig struct {
	// Templates maps E2B template names to moat templates. A name not in the map is
	// looked up as a moat template itself.
	Templates map[string]string
	// DefaultTimeout applies when a create names none (E2B's default: 300 s).
	DefaultTimeout time.Duration
}

// DefaultE2BTemplates returns the mapping when none is configured: E2B programs assume `base`
// has user `user` with passwordless sudo, bash, git and python3 — the clean Debian
// template.
func DefaultE2BTemplates() map[string]string { return map[string]string{"base": "debian"} }

// EnvdVersion is the envd protocol version moat-init implements, as E2B reports it: the
// SDK enables features by it (octet-stream uploads 0.5.7, file metadata 0.6.2, watch
// options 0.6.4).
const EnvdVersion = "0.6.4"

const (
	e2bSandboxHeader = "E2b-Sandbox-Id"
	e2bPortHeader    = "E2b-Sandbox-Port"
	// envdPort is the only sandbox port the gateway forwards.
	envdPort = "49983"
)

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeE2BError(w http.ResponseWriter, err error) {
	status, code := StatusOf(err)
	noteErrorClass(w, code) // metrics.go
	writeJSON(w, status, e2bError{Code: status, Message: ClientMessage(err)})
}

// writeGone is the gateway's answer for a sandbox that is not running: 502, which the SDK
// reads as "not running" (isRunning() → false, RPCs → TimeoutError).
func writeGone(w http.ResponseWriter, id, why string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found: " + why, "code": http.StatusBadGateway})
}

// e2bNotImplemented answers the E2B routes moat does not serve yet.
func e2bNotImplemented(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeE2BError(w, fmt.Errorf("moat does not implement E2B %s (%s %s) yet: %w", what, r.Method, r.URL.Path, errdefs.ErrNotImplemented))
	}
}

// e2bRoutes are the E2B control-plane routes (added to the one route table in New).
func (s *Server) e2bRoutes() []route {
	return append(append(s.e2bSnapshotRoutes(), s.e2bTemplateRoutes()...), []route{
		{"POST /sandboxes", s.e2bCreate, byKey},
		{"POST /v2/sandboxes", s.e2bCreate, byKey},
		{"GET /sandboxes", s.e2bList(false), byKey},
		{"GET /v2/sandboxes", s.e2bList(true), byKey},
		{"GET /sandboxes/{id}", s.e2bGet, byKey},
		{"DELETE /sandboxes/{id}", s.e2bKill, byKey},
		{"POST /sandboxes/{id}/timeout", s.e2bSetTimeout, byKey},
		{"POST /sandboxes/{id}/pause", s.e2bPause, byKey},
		{"POST /sandboxes/{id}/resume", s.e2bConnect, byKey},
		{"POST /sandboxes/{id}/connect", s.e2bConnect, byKey},
		{"POST /v2/sandboxes/{id}/connect", s.e2bConnect, byKey},
		{"GET /sandboxes/{id}/metrics", s.e2bMetrics, byKey},
		{"PUT /sandboxes/{id}/network", s.e2bNetwork, byKey},
		{"POST /sandboxes/{id}/refreshes", s.e2bRefresh, byKey},
		{"GET /sandboxes/{id}/logs", e2bNotImplemented("sandbox logs"), byKey},
		{"GET /v2/sandboxes/{id}/logs", e2bNotImplemented("sandbox logs"), byKey},
		{"GET /sandboxes/metrics", e2bNotImplemented("metrics of many sandboxes"), byKey},
		{"/templates/", e2bNotImplemented("template builds"), byKey},
		{"/templates", e2bNotImplemented("template builds"), byKey},
		{"/v2/templates/", e2bNotImplemented("template builds"), byKey},
		{"/v2/templates", e2bNotImplemented("template builds"), byKey},
		{"/v3/templates", e2bNotImplemented("template builds"), byKey},
		{"/secrets", e2bNotImplemented("secrets"), byKey},
		{"/secrets/", e2bNotImplemented("secrets"), byKey},
		{"/volumes", e2bNotImplemented("volumes"), byKey},
		{"/volumes/", e2bNotImplemented("volumes"), byKey},
		{"/teams", e2bNotImplemented("teams"), byKey},
	}...)
}

// e2bCreateRequest is the body of POST /v2/sandboxes. Fields moat does not enforce are
// decoded only to refuse them by name.
type e2bCreateRequest struct {
	TemplateID          string                  `json:"templateID"`
	Timeout             *int64                  `json:"timeout"`
	Metadata            map[string]string       `json:"metadata"`
	EnvVars             map[string]string       `json:"envVars"`
	AutoPause           *bool                   `json:"autoPause"`
	AutoPauseMemory     *bool                   `json:"autoPauseMemory"`
	AutoResume          *struct{ Enabled bool } `json:"autoResume"`
	Secure              *bool                   `json:"secure"`
	AllowInternetAccess *bool                   `json:"allow_internet_access"`
	Network             *e2bNetwork             `json:"network"`
	MCP                 json.RawMessage         `json:"mcp"`
	IAM                 json.RawMessage         `json:"iam"`
	VolumeMounts        json.RawMessage         `json:"volumeMounts"`
}

// e2bNetwork is E2B's network configuration; moat enforces allowOut and denyOut.
type e2bNetwork struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	Rules              json.RawMessage `json:"rules"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    json.RawMessage `json:"maskRequestHost"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
}

// e2bSandbox is the create/connect answer.
type e2bSandbox struct {
	SandboxID       string  `json:"sandboxID"`
	TemplateID      string  `json:"templateID"`
	Alias           string  `json:"alias,omitempty"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
	// TrafficAccessToken opens the sandbox's ports to the SDK (previews.go).
	TrafficAccessToken *string `json:"trafficAccessToken,omitempty"`
}

// E2BListed is one sandbox of E2B's list, and the base of getInfo's answer (the cluster
// front answers lists with it too).
type E2BListed struct {
	SandboxID    string            `json:"sandboxID"`
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	State        string            `json:"state"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	EnvdVersion  string            `json:"envdVersion"`
	Metadata     map[string]string `json:"metadata"`
	VolumeMounts []any             `json:"volumeMounts"`
}

type e2bDetail struct {
	E2BListed
	EnvdAccessToken     string        `json:"envdAccessToken"`
	Domain              *string       `json:"domain"`
	AllowInternetAccess bool          `json:"allowInternetAccess"`
	Network             *e2bNetworkIn `json:"network,omitempty"`
	Lifecycle           e2bLifecycle  `json:"lifecycle"`
}

type e2bNetworkIn struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

type e2bLifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// DecodeE2B decodes a JSON body leniently (the SDK sends fields moat ignores by design,
// such as empty objects) and accepts an empty body.
func DecodeE2B(r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (s *Server) e2bCreate(w http.ResponseWriter, r *http.Request) {
	var req e2bCreateRequest
	if err := DecodeE2B(r, &req); err != nil {
		writeE2BError(w, err)
		return
	}
	opts, err := s.e2bOptions(r.Context(), req)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	sb, err := s.sandboxes.Create(r.Context(), opts)
	if err == nil {
		err = s.templateStartOrDelete(r.Context(), sb) // e2b_templates.go
	}
	if err != nil {
		writeE2BError(w, err)
		return
	}
	e := toE2BSandbox(sb)
	s.e2bPreviewFields(r.Context(), &e) // previews.go
	writeJSON(w, http.StatusCreated, e)
}

// e2bOptions turns a create request into moat's options, refusing by name every option
// moat would otherwise have to ignore.
func (s *Server) e2bOptions(ctx context.Context, req e2bCreateRequest) (sandbox.CreateOptions, error) {
	bad := func(field, why string) error {
		return fmt.Errorf("%s: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	switch {
	case len(req.MCP) > 0 && string(req.MCP) != "null":
		return sandbox.CreateOptions{}, bad("mcp", "MCP gateways are not supported by moat")
	case len(req.IAM) > 0 && string(req.IAM) != "null":
		return sandbox.CreateOptions{}, bad("iam", "IAM tokens are not supported by moat (use moat's credential brokering)")
	case len(req.VolumeMounts) > 0 && string(req.VolumeMounts) != "null" && string(req.VolumeMounts) != "[]":
		return sandbox.CreateOptions{}, bad("volumeMounts", "volumes are not supported by moat yet")
	}
	timeout := s.e2b.DefaultTimeout
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			return sandbox.CreateOptions{}, bad("timeout", "must be a positive number of seconds")
		}
		var err error
		if timeout, err = timeoutSeconds("timeout", *req.Timeout); err != nil {
			return sandbox.CreateOptions{}, err
		}
	}
	tmpl := cmp.Or(req.TemplateID, "base")
	src, err := s.e2bSource(ctx, e2bTaggedName(tmpl)) // a template or a snapshot (e2b_snapshot.go); name:tag (e2b_templates.go)
	if err != nil {
		return sandbox.CreateOptions{}, err
	}
	onTimeout := sandbox.OnTimeoutDelete
	if req.AutoPause != nil && *req.AutoPause {
		onTimeout = sandbox.OnTimeoutPause
		if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
			onTimeout = sandbox.OnTimeoutStop
		}
	}
	pol, err := e2bPolicy(req.AllowInternetAccess, req.Network)
	if err != nil {
		return sandbox.CreateOptions{}, err
	}
	md := req.Metadata
	opts := sandbox.CreateOptions{
		Template: src.Template, TemplateAlias: tmpl, Env: req.EnvVars, Metadata: md,
		Timeout: timeout, OnTimeout: onTimeout, Policy: pol,
	}
	if src.Snapshot != nil {
		// Template, drive and (unless the request names one) policy are the snapshot's.
		opts.Template, opts.TemplateAlias, opts.FromSnapshot = "", "", src.Snapshot.ID
	}
	e2bLifecycleOptions(&opts, req)
	if err := s.e2bTemplateLimits(ctx, opts.Template, &opts); err != nil { // e2b_templates.go
		return sandbox.CreateOptions{}, err
	}
	if err := s.applyTier(md[E2BTierKey], &opts); err != nil {
		return sandbox.CreateOptions{}, err
	}
	return opts, nil
}

// e2bPolicy maps E2B's network options onto an egress policy. Without either, the
// sandbox gets moat's default (deny-all). allow_internet_access true opens everything
// public; allowOut entries are allowed (and with a denyOut of 0.0.0.0/0, only they are);
// denyOut entries are denied.
func e2bPolicy(internet *bool, n *e2bNetwork) (*policy.Spec, error) {
	if internet == nil && n == nil {
		return nil, nil
	}
	bad := func(field, why string) error {
		return fmt.Errorf("network.%s: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	var rules policy.Rules
	// E2B's internet access is on unless turned off; moat's default (no option at all) is
	// off, handled above. A network block with only denyOut means "internet minus these".
	open := internet == nil || *internet
	if n != nil {
		switch {
		case len(n.EgressProxy) > 0 && string(n.EgressProxy) != "null":
			return nil, bad("egressProxy", "an upstream egress proxy is not supported by moat")
		case len(n.Rules) > 0 && string(n.Rules) != "null" && string(n.Rules) != "{}":
			return nil, bad("rules", "request transforms are not supported by moat (use moat's credential brokering)")
		case n.AllowPublicTraffic != nil && *n.AllowPublicTraffic:
			return nil, bad("allowPublicTraffic", "moat exposes no sandbox ports publicly")
		case len(n.MaskRequestHost) > 0 && string(n.MaskRequestHost) != "null":
			return nil, bad("maskRequestHost", "not supported by moat")
		case len(n.HTTPSPorts) > 0 && string(n.HTTPSPorts) != "null" && string(n.HTTPSPorts) != "[]":
			return nil, bad("httpsPorts", "not supported by moat")
		}
		for _, d := range n.DenyOut {
			if d == "0.0.0.0/0" {
				open = false
				continue
			}
			rules.Deny = append(rules.Deny, d)
		}
		rules.Allow = append(rules.Allow, n.AllowOut...)
	}
	switch {
	case open:
		rules.Net = policy.NetAllowAll
	case len(rules.Allow) == 0:
		rules.Net = policy.NetDenyAll
		rules.Deny = nil
	}
	spec := policy.Single(rules)
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	return &spec, nil
}

// builds runs first-use template builds in the background, one per template.
type builds struct {
	mu   sync.Mutex
	last map[string]string // template → latest progress line, while building
}

func (b *builds) start(s *Server, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[string]string{}
	}
	if msg, ok := b.last[name]; ok {
		return fmt.Errorf("template %s is being built on first use, retry in a minute (%s): %w", name, msg, errdefs.ErrUnavailable)
	}
	b.last[name] = "starting"
	go func() {
		progress := func(msg string) {
			b.mu.Lock()
			b.last[name] = msg
			b.mu.Unlock()
			s.log.Info("building E2B base template", "template", name, "progress", msg)
		}
		_, err := s.templates.Build(context.Background(), v1.TemplateRequest{Name: name}, progress)
		if err != nil {
			s.log.Error("building template on first use", "template", name, "err", err)
		}
		b.mu.Lock()
		delete(b.last, name)
		b.mu.Unlock()
	}()
	return fmt.Errorf("template %s is not built yet: building it now (about two minutes; `moat template build %s` does it ahead of time), retry then: %w", name, name, errdefs.ErrUnavailable)
}

func toE2BSandbox(sb *sandbox.Sandbox) e2bSandbox {
	return e2bSandbox{
		SandboxID: sb.ID, TemplateID: e2bTemplateID(sb), Alias: e2bTemplateID(sb), ClientID: "moat",
		EnvdVersion: EnvdVersion, EnvdAccessToken: sb.AccessToken,
	}
}

func e2bTemplateID(sb *sandbox.Sandbox) string { return cmp.Or(sb.TemplateAlias, sb.Template) }

// e2bState is the E2B state of a sandbox, or "" for one E2B does not list: a stopped
// sandbox (drive kept, processes gone) is E2B's filesystem-only "paused".
func e2bState(s sandbox.State) string {
	switch s {
	case sandbox.StateRunning:
		return "running"
	case sandbox.StatePaused, sandbox.StateStopped:
		return "paused"
	}
	return ""
}

func e2bStateOrMoat(st sandbox.State) string { return cmp.Or(e2bState(st), string(st)) }

func toE2BListed(sb *sandbox.Sandbox) E2BListed {
	end := sb.CreatedAt.Add(sb.Timeout)
	if sb.ExpiresAt != nil {
		end = *sb.ExpiresAt
	}
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return E2BListed{
		SandboxID: sb.ID, TemplateID: e2bTemplateID(sb), Alias: e2bTemplateID(sb), ClientID: "moat",
		StartedAt: sb.CreatedAt, EndAt: end, State: e2bState(sb.State),
		CPUCount: max(1, int(sb.Limits.CPUs+0.999)), MemoryMB: sb.Limits.MemoryBytes >> 20, DiskSizeMB: sb.Limits.DiskBytes >> 20,
		EnvdVersion: EnvdVersion, Metadata: md, VolumeMounts: []any{},
	}
}

// e2bLookup gets a sandbox the E2B API may show (not warm, not being deleted).
func (s *Server) e2bLookup(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := s.sandboxes.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if e2bState(sb.State) == "" && sb.State != sandbox.StateCreating {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}

// e2bBegin decodes a per-sandbox request's body into body (nil: none) and looks its
// sandbox up; on failure it has answered and returns false.
func (s *Server) e2bBegin(w http.ResponseWriter, r *http.Request, body any) (*sandbox.Sandbox, bool) {
	if body != nil {
		if err := DecodeE2B(r, body); err != nil {
			writeE2BError(w, err)
			return nil, false
		}
	}
	sb, err := s.e2bLookup(r.Context(), r.PathValue("id"))
	if err != nil {
		writeE2BError(w, err)
		return nil, false
	}
	return sb, true
}

func (s *Server) e2bGet(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.e2bBegin(w, r, nil)
	if !ok {
		return
	}
	d := e2bDetail{E2BListed: toE2BListed(sb), EnvdAccessToken: envdTokenFor(sandbox.CallerFrom(r.Context()), sb), Domain: s.previewDomain()} // owners.go, previews.go
	pol := sb.EgressPolicy()
	if rules, ok := pol.Phases[pol.Phase]; ok {
		d.AllowInternetAccess = rules.Net == policy.NetAllowAll
		if len(rules.Allow) > 0 || len(rules.Deny) > 0 {
			d.Network = &e2bNetworkIn{AllowOut: rules.Allow, DenyOut: rules.Deny}
		}
	}
	d.Lifecycle.OnTimeout, d.Lifecycle.AutoResume = "kill", sb.AutoResume
	if sb.OnTimeout == sandbox.OnTimeoutPause || sb.OnTimeout == sandbox.OnTimeoutStop {
		d.Lifecycle.OnTimeout = "pause"
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) e2bKill(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.e2bBegin(w, r, nil)
	if !ok {
		return
	}
	if err := s.sandboxes.Delete(r.Context(), sb.ID); err != nil {
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) e2bSetTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout int64 `json:"timeout"`
	}
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	if req.Timeout <= 0 {
		writeE2BError(w, fmt.Errorf("timeout: must be a positive number of seconds: %w", errdefs.ErrInvalidArgument))
		return
	}
	d, err := timeoutSeconds("timeout", req.Timeout)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	if _, err := s.sandboxes.SetTimeout(r.Context(), sb.ID, d); err != nil {
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bRefresh is the older SDKs' keep-alive: {"duration": seconds} extends the timeout.
func (s *Server) e2bRefresh(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Duration int64 `json:"duration"`
	}
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	id := sb.ID
	d, err := timeoutSeconds("duration", max(req.Duration, 0))
	if err != nil {
		writeE2BError(w, err)
		return
	}
	if d <= 0 {
		d = sb.Timeout
	}
	if d <= 0 {
		// A sandbox that never had a timeout (a native one) keeps none: a keep-alive
		// without a duration gives it no deadline.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if _, err := s.sandboxes.SetTimeout(r.Context(), id, d); err != nil {
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bPause pauses a running sandbox: with memory (the default) its processes freeze and
// stay; with "memory": false they stop and only the drive stays. A paused sandbox has no
// deadline until it is resumed.
func (s *Server) e2bPause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Memory *bool `json:"memory"`
	}
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	id := sb.ID
	if sb.State != sandbox.StateRunning {
		writeE2BError(w, fmt.Errorf("sandbox %s is %s, not running: %w", id, e2bStateOrMoat(sb.State), errdefs.ErrConflict))
		return
	}
	var err error
	if req.Memory == nil || *req.Memory {
		_, err = s.sandboxes.Pause(r.Context(), id)
	} else {
		_, err = s.sandboxes.Stop(r.Context(), id)
	}
	if err == nil {
		_, err = s.sandboxes.SetTimeout(r.Context(), id, 0)
	}
	if err != nil {
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bConnect makes a sandbox usable: a running one answers 200 (its timeout extended when
// the request names one), a paused one is resumed (frozen: thawed; filesystem-only: started
// again with its drive) and answers 201.
func (s *Server) e2bConnect(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	id := sb.ID
	status := http.StatusOK
	var asked time.Duration // checked before anything changes
	if req.Timeout != nil && *req.Timeout > 0 {
		var err error
		if asked, err = timeoutSeconds("timeout", *req.Timeout); err != nil {
			writeE2BError(w, err)
			return
		}
	}
	// A request waking the sandbox through the gateway at the same time waits (and the
	// other way round): the template's start command runs once (e2b_templates.go).
	unlock, sb, err := s.e2bWakeLocked(r.Context(), sb)
	defer unlock()
	if err != nil {
		writeE2BError(w, err)
		return
	}
	switch sb.State {
	case sandbox.StatePaused:
		if req.Memory != nil && !*req.Memory {
			// "Reboot" on resume: start afresh from the drive.
			if _, err = s.sandboxes.Stop(r.Context(), id); err == nil {
				_, err = s.sandboxes.Start(r.Context(), id)
			}
		} else {
			_, err = s.sandboxes.Resume(r.Context(), id)
		}
		status = http.StatusCreated
	case sandbox.StateStopped:
		_, err = s.sandboxes.Start(r.Context(), id)
		status = http.StatusCreated
	}
	if err == nil && (sb.State == sandbox.StateStopped || sb.State == sandbox.StatePaused && req.Memory != nil && !*req.Memory) {
		err = s.e2bTemplateStart(r.Context(), sb) // started afresh: the template's start command again (e2b_templates.go)
	}
	if err != nil {
		writeE2BError(w, err)
		return
	}
	if d, extend := e2bConnectDeadline(status == http.StatusCreated, sb.ExpiresAt, sb.Timeout, asked, time.Now()); extend {
		if _, err = s.sandboxes.SetTimeout(r.Context(), id, d); err != nil {
			writeE2BError(w, err)
			return
		}
	}
	if sb, err = s.sandboxes.Get(r.Context(), id); err != nil {
		writeE2BError(w, err)
		return
	}
	e := toE2BSandbox(sb)
	s.e2bPreviewFields(r.Context(), &e) // previews.go
	writeJSON(w, status, e)
}

func (s *Server) e2bMetrics(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.e2bBegin(w, r, nil)
	if !ok {
		return
	}
	id := sb.ID
	type metric struct {
		Timestamp     time.Time `json:"timestamp"`
		TimestampUnix int64     `json:"timestampUnix"`
		CPUUsedPct    float64   `json:"cpuUsedPct"`
		CPUCount      int       `json:"cpuCount"`
		MemUsed       int64     `json:"memUsed"`
		MemTotal      int64     `json:"memTotal"`
		DiskUsed      int64     `json:"diskUsed"`
		DiskTotal     int64     `json:"diskTotal"`
	}
	start, end, err := metricsRange(r.URL.Query().Get)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	out := []metric{}
	// moat keeps no history: the answer is one sample taken now, when now is in the
	// requested range (start/end: Unix seconds, e2b_compat.go).
	if sb.State == sandbox.StateRunning && inRange(time.Now(), start, end) {
		m, err := s.sandboxes.Metrics(r.Context(), id)
		if err != nil {
			writeE2BError(w, err)
			return
		}
		if !inRange(m.Time, start, end) {
			writeJSON(w, http.StatusOK, out)
			return
		}
		out = append(out, metric{
			Timestamp: m.Time.UTC(), TimestampUnix: m.Time.Unix(), CPUUsedPct: m.CPUUsedPct,
			CPUCount: max(1, int(m.CPUCount+0.999)), MemUsed: m.MemUsed, MemTotal: m.MemTotal,
			DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bNetwork serves PUT /sandboxes/{id}/network: the sandbox's egress policy is replaced
// at once (connections the new one does not allow are cut).
func (s *Server) e2bNetwork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		e2bNetwork
		AllowInternetAccess *bool `json:"allow_internet_access"`
	}
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	id := sb.ID
	pol, err := e2bPolicy(req.AllowInternetAccess, &req.e2bNetwork)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	if pol == nil {
		d := policy.DenyAll()
		pol = &d
	}
	if _, _, err := s.sandboxes.SetPolicy(r.Context(), id, sandbox.PolicyUpdate{Spec: pol}); err != nil {
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bList serves GET /v2/sandboxes (and the older GET /sandboxes, which lists running
// sandboxes without paging): metadata, state, startedAfter and template filters, newest
// first unless order=asc, limit and nextToken paging with X-Next-Token.
func (s *Server) e2bList(v2 bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		want, err := parseE2BMetadata(q.Get("metadata"))
		if err != nil {
			writeE2BError(w, err)
			return
		}
		states := map[string]bool{"running": true}
		if v2 {
			states["paused"] = true
		}
		if st := q.Get("state"); st != "" {
			states = map[string]bool{}
			for _, x := range strings.Split(st, ",") {
				if x != "running" && x != "paused" {
					writeE2BError(w, fmt.Errorf("state %q: want running or paused: %w", x, errdefs.ErrInvalidArgument))
					return
				}
				states[x] = true
			}
		}
		limit := 100
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 {
				writeE2BError(w, fmt.Errorf("limit %q: want 1 to 100: %w", v, errdefs.ErrInvalidArgument))
				return
			}
			limit = n
		}
		f, err := parseE2BListFilter(q.Get)
		if err != nil {
			writeE2BError(w, err)
			return
		}
		list, err := s.visible(r.Context())
		if err != nil {
			writeE2BError(w, err)
			return
		}
		out := []E2BListed{}
		for _, sb := range list {
			if st := e2bState(sb.State); st != "" && states[st] && metadataMatches(sb.Metadata, want) && f.matches(sb) {
				out = append(out, toE2BListed(sb))
			}
		}
		slices.SortStableFunc(out, func(a, b E2BListed) int {
			return cmp.Or(a.StartedAt.Compare(b.StartedAt), strings.Compare(a.SandboxID, b.SandboxID))
		})
		if f.desc {
			slices.Reverse(out) // E2B's default: newest first
		}
		if !v2 {
			writeJSON(w, http.StatusOK, out)
			return
		}
		if tok := q.Get("nextToken"); tok != "" {
			// The token is the position (start time, ID) of the last sandbox of the page
			// before, so that page survives its sandboxes being killed meanwhile.
			at, id, err := parseListToken(tok)
			if err != nil {
				writeE2BError(w, err)
				return
			}
			desc := f.desc
			i := slices.IndexFunc(out, func(x E2BListed) bool {
				c := cmp.Or(x.StartedAt.Compare(at), strings.Compare(x.SandboxID, id))
				return c > 0 && !desc || c < 0 && desc
			})
			if i < 0 {
				i = len(out)
			}
			out = out[i:]
		}
		if len(out) > limit {
			out = out[:limit]
			last := out[limit-1]
			w.Header().Set("X-Next-Token", listToken(last.StartedAt, last.SandboxID))
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func listToken(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + " " + id))
}

func parseListToken(tok string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		ts, id, ok := strings.Cut(string(b), " ")
		if at, perr := time.Parse(time.RFC3339Nano, ts); ok && perr == nil && id != "" {
			return at, id, nil
		}
	}
	return time.Time{}, "", fmt.Errorf("nextToken %q is not one this server gave: %w", tok, errdefs.ErrInvalidArgument)
}

// parseE2BMetadata reads the metadata filter: a query string ("k=v&k2=v2", each part
// escaped), itself escaped once more inside the query parameter.
func parseE2BMetadata(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	inner, err := url.QueryUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata filter: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	out := map[string]string{}
	for _, pair := range strings.Split(inner, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if k, err = url.QueryUnescape(k); err == nil {
			v, err = url.QueryUnescape(v)
		}
		if err != nil {
			return nil, fmt.Errorf("metadata filter: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		out[k] = v
	}
	return out, nil
}

func metadataMatches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
