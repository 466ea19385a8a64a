// Package apiserver is moat's HTTP edge: one route table, one authentication gate, and one
// mapping from error classes to HTTP status codes. It serves the native REST API under /v1
// and forwards each sandbox's envd protocol (Connect-RPC + /files) to its moat-init.
package apiserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/tiers"
	"github.com/moatdev/moat/internal/usage"
)

// Sandboxes is the lifecycle surface the API needs. Implemented by *sandbox.Manager.
type Sandboxes interface {
	Create(ctx context.Context, opts sandbox.CreateOptions) (*sandbox.Sandbox, error)
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context) ([]*sandbox.Sandbox, error)
	Stop(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Start(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Pause(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, id string) (*sandbox.Sandbox, error)
	Delete(ctx context.Context, id string) error
	// DeleteStopped deletes a sandbox only if it is stopped (ErrConflict otherwise).
	DeleteStopped(ctx context.Context, id string) error
	// Check stops a running sandbox whose container died on its own.
	Check(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// SetPolicy changes the egress policy or phase; it returns the connections cut.
	SetPolicy(ctx context.Context, id string, u sandbox.PolicyUpdate) (*sandbox.Sandbox, int, error)
	// SetTimeout moves the sandbox's deadline to d from now (d ≤ 0: none).
	SetTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error)
	// Metrics samples a running sandbox's CPU, memory and drive use.
	Metrics(ctx context.Context, id string) (sandbox.Metric, error)
	// Usage samples a running sandbox for `moat stats`: Metrics, tasks and network.
	Usage(ctx context.Context, id string) (sandbox.Usage, error)
	EnvdTransport() http.RoundTripper
	// Touch and Acquire record use of a sandbox (idle.go).
	Touch(id string)
	Acquire(ctx context.Context, id string) (*sandbox.Sandbox, func(), error)
}

// Templates is the template surface the API needs.
type Templates interface {
	List(ctx context.Context) ([]v1.Template, error)
	Build(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error)
	Import(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error)
	Pull(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error)
}

// Authenticator checks API keys on TCP listeners. The unix socket (mode 0600, root) needs
// none.
type Authenticator interface {
	// Authenticate returns who key belongs to: the API key's id and the secrets it is
	// granted. An unknown key is an errdefs.ErrUnauthenticated error.
	Authenticate(ctx context.Context, key string) (sandbox.Caller, error)
}

// APIKeys manages API keys. Only the unix socket serves these routes.
type APIKeys interface {
	// CreateAPIKey makes a key granted the named secrets (names checked by the caller),
	// with the given maxima of its sandboxes' limits.
	CreateAPIKey(ctx context.Context, secrets []string, max v1.KeyMaxima) (v1.APIKey, error)
	ListAPIKeys(ctx context.Context) ([]v1.APIKey, error)
	DeleteAPIKey(ctx context.Context, id string) error
	// SetAPIKeySecrets replaces the grants of key id (errdefs.ErrNotFound if none).
	SetAPIKeySecrets(ctx context.Context, id string, secrets []string) (v1.APIKey, error)
	// SetAPIKeyMax replaces the maxima of key id (errdefs.ErrNotFound if none).
	SetAPIKeyMax(ctx context.Context, id string, max v1.KeyMaxima) (v1.APIKey, error)
}

// Events reads a sandbox's logs: lifecycle events and egress decisions.
type Events interface {
	Events(ctx context.Context, id string) ([]v1.Event, error)
	// Egress returns up to limit entries with seq > after (limit ≤ 0: all).
	Egress(ctx context.Context, id string, after int64, limit int) ([]v1.EgressEntry, error)
}

// Server is the HTTP API.
type Server struct {
	sandboxes Sandboxes
	templates Templates
	events    Events
	keys      APIKeys
	secrets   Secrets
	doctor    func(ctx context.Context) any
	e2b       E2BConfig
	builds    builds
	log       *slog.Logger
	mux       *http.ServeMux
	proxy     *httputil.ReverseProxy
	// workspaces serves diff and export (workspace.go); nil: not available.
	workspaces Workspaces
	// templateAdmin removes templates and builds Dockerfiles (templates.go); nil: not available.
	templateAdmin TemplateAdmin
	changes       Changes   // change records of git pushes (SetChanges); nil: none
	snaps         Snapshots // snapshots, restore and fork (SetSnapshots); nil: none
	users         Users     // accounts in sandboxes (SetUsers, users.go); nil: none

	// archives lists the drive archives of sandboxes deleted unused (SetArchives); nil: none.
	archives Archives
	// e2bt holds E2B template builds (e2b_templates.go).
	e2bt *e2bTemplateState
	// approvalsSvc are the approvals (SetApprovals, approvals.go); nil: none.
	approvalsSvc Approvals
	// auditLog is the audit log (SetAudit, audit.go); nil: none.
	auditLog AuditLog
	// tiers are the consequence tiers (SetTiers; default: the built-ins).
	tiers *tiers.Set
	// metrics is GET /metrics and the request observer (SetMetrics, metrics.go).
	metrics metricsConfig
	// routes is the route table, access each pattern's access class (the gate's).
	routes []route
	access map[string]access
	// protectedExtra are the operator's protected path globs (SetProtectedPaths, inventory.go).
	protectedExtra []string
	templateScan   TemplateScanner // ?scan=true of GET /v1/inventory; nil: none

	// usage is the usage ledger and calls the API-call counter (SetUsage, usage.go); nil: none.
	usageLedger UsageLedger
	calls       *usage.Calls
	previews    *previewState // port previews (SetPreviews, previews.go); nil: off

	console *consoleConfig // the web console and its sessions (SetConsole, session.go); nil: none
}

// route is one entry of the route table: its pattern, its handler and who may call it.
type route struct {
	pattern string
	h       http.HandlerFunc
	access  access
}

// access is who may call a route. It is declared with each route in the table, and the
// gate (Handler) enforces it before any handler runs: nothing else decides it.
type access int

const (
	// byKey: an API key on a TCP listener, or anyone on the unix socket (the operator).
	byKey access = iota
	// public: anyone, no key asked (liveness).
	public
	// socketOnly: the operator on the daemon's unix socket only; an API key is refused
	// (403) however valid: API keys, secrets, drive archives, template administration.
	socketOnly
)

// Deps are what the API serves, supplied by the composition root (nil: the routes that
// need it answer that it is not available). The parts added later (workspaces, changes,
// snapshots, archives, template administration) are set with the Set* methods.
type Deps struct {
	Sandboxes Sandboxes
	Templates Templates
	Events    Events
	Keys      APIKeys
	Secrets   Secrets
	Doctor    func(context.Context) any
	E2B       E2BConfig
	Log       *slog.Logger
}

// New builds the route table: moat's native API under /v1/, the E2B-compatible control
// plane beside it (e2b.go).
func New(d Deps) *Server {
	sb, tpl, ev, keys, sec, doctor, e2b, log := d.Sandboxes, d.Templates, d.Events, d.Keys, d.Secrets, d.Doctor, d.E2B, d.Log
	if e2b.Templates == nil {
		e2b.Templates = DefaultE2BTemplates()
	}
	if e2b.DefaultTimeout == 0 {
		e2b.DefaultTimeout = 300 * time.Second
	}
	s := &Server{sandboxes: sb, templates: tpl, events: ev, keys: keys, secrets: sec, doctor: doctor, e2b: e2b, log: log, mux: http.NewServeMux()}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: s.rewriteEnvd,
		// audit.go: an exec's end (exit code) is recorded as its response stream passes.
		ModifyResponse: auditExecEnd,
		Transport:      sb.EnvdTransport(),
		FlushInterval:  -1, // stream process output as it comes
		// A client that leaves a stream early makes the copy fail; that is routine.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			dest := r.Context().Value(envdTarget{}).(envdDest)
			s.log.Warn("envd forward failed", "sandbox", dest.id, "path", dest.rest, "err", err)
			if dest.e2b {
				writeGone(w, dest.id, "the sandbox is not reachable")
				return
			}
			if sb, cerr := s.sandboxes.Check(context.WithoutCancel(r.Context()), dest.id); cerr == nil && sb.State != sandbox.StateRunning {
				writeError(w, fmt.Errorf("sandbox %s is %s: %s: %w", sb.ID, sb.State, sb.Error, errdefs.ErrConflict))
				return
			}
			writeError(w, fmt.Errorf("sandbox %s is not reachable: %w", dest.id, errdefs.ErrUnavailable))
		},
	}
	// The one route table.
	routes := []route{
		{"GET /v1/health", s.health, byKey},
		{"POST /v1/sandboxes", s.create, byKey},
		{"GET /v1/sandboxes", s.list, byKey},
		{"GET /v1/sandboxes/{id}", s.get, byKey},
		{"DELETE /v1/sandboxes/{id}", s.delete, byKey},
		{"POST /v1/sandboxes/{id}/stop", s.lifecycle((Sandboxes).Stop), byKey},
		{"POST /v1/sandboxes/{id}/start", s.lifecycle((Sandboxes).Start), byKey},
		{"POST /v1/sandboxes/{id}/pause", s.lifecycle((Sandboxes).Pause), byKey},
		{"POST /v1/sandboxes/{id}/resume", s.lifecycle((Sandboxes).Resume), byKey},
		{"GET /v1/sandboxes/{id}/events", s.sandboxEvents, byKey},
		{"PUT /v1/sandboxes/{id}/policy", s.setPolicy, byKey},
		{"GET /v1/sandboxes/{id}/egress", s.egressLog, byKey},
		{"/v1/sandboxes/{id}/envd/{rest...}", s.envd, byKey},
		{"GET /v1/templates", s.listTemplates, byKey},
		{"POST /v1/templates/build", s.templateOp(Templates.Build), byKey},
		{"POST /v1/templates/import", s.templateOp(Templates.Import), socketOnly},
		{"POST /v1/templates/pull", s.templateOp(Templates.Pull), byKey},
		{"GET /v1/doctor", s.runDoctor, byKey},
		{"POST /v1/apikeys", s.createKey, socketOnly},
		{"GET /v1/apikeys", s.listKeys, socketOnly},
		{"DELETE /v1/apikeys/{id}", s.deleteKey, socketOnly},
		{"PUT /v1/apikeys/{id}/secrets", s.setKeySecrets, socketOnly},
		{"PUT /v1/apikeys/{id}/max", s.setKeyMax, socketOnly},
		{"GET /v1/secrets", s.listSecrets, socketOnly},
		{"PUT /v1/secrets/{name}", s.setSecret, socketOnly},
		{"PUT /v1/secrets/{name}/scope", s.setSecretScope, socketOnly},
		{"DELETE /v1/secrets/{name}", s.deleteSecret, socketOnly},
	}
	routes = append(routes, s.workspaceRoutes()...)
	routes = append(routes, s.changeRoutes()...)
	routes = append(routes, s.snapshotRoutes()...)
	routes = append(routes, s.checkpointRoutes()...)
	routes = append(routes, s.idleRoutes()...)
	routes = append(routes, s.nameRoutes()...)
	routes = append(routes, s.statsRoutes()...)
	routes = append(routes, s.userRoutes()...)
	routes = append(routes, s.templateRoutes()...)
	routes = append(routes, s.approvalRoutes()...)
	routes = append(routes, s.tierRoutes()...)
	routes = append(routes, s.e2bRoutes()...)
	routes = append(routes, s.userEgressRoutes()...)
	routes = append(routes, s.inventoryRoutes()...)
	routes = append(routes, s.auditRoutes()...)   // audit.go
	routes = append(routes, s.usageRoutes()...)   // usage.go (metering)
	routes = append(routes, s.ownerRoutes()...)   // owners.go (visibility)
	routes = append(routes, s.previewRoutes()...) // previews.go
	routes = append(routes, s.consoleRoutes()...) // session.go: the web console
	routes = append(routes, route{"GET /health", s.health, public})
	s.routes, s.access = routes, map[string]access{}
	for _, r := range routes {
		h := r.h
		if strings.Contains(r.pattern, "/sandboxes/{id}") {
			h = s.owned(h, strings.Contains(r.pattern, "/v1/"))
		}
		s.mux.HandleFunc(r.pattern, h)
		s.access[r.pattern] = r.access
	}
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		if s.notAllowed(w, r, writeError) {
			return
		}
		writeError(w, fmt.Errorf("no route for %s %s: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.notAllowed(w, r, writeE2BError) {
			return
		}
		writeE2BError(w, fmt.Errorf("moat does not implement %s %s (native API: /v1/; E2B: see the README): %w", r.Method, r.URL.Path, errdefs.ErrNotImplemented))
	})
	return s
}

// Handler returns the API with the authentication gate: when auth is nil (the unix
// socket) every request passes, as the operator; otherwise an API key must be given, as
// `Authorization: Bearer <key>` (native clients) or `X-API-KEY: <key>` (E2B SDKs), and the
// request acts as that key (with its grants). The gate is the one place that says who the
// caller is: it puts it in the request's context (sandbox.WithCaller). Requests for a
// sandbox's envd (E2B's E2b-Sandbox-Id header, or a signed /files URL) need no API key:
// moat-init checks their access token or signature itself (a token only those who may use
// the sandbox can obtain: see owned). GET /health is open.
func (s *Server) Handler(auth Authenticator) http.Handler {
	return s.instrument(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.servePreview(w, r, auth) { // previews.go: a preview host or /preview/
			return
		}
		if r.URL.Path == "/metrics" { // its own access rule (metrics.go)
			s.serveMetrics(w, r, auth == nil)
			return
		}
		if r.Header.Get(e2bSandboxHeader) != "" {
			s.e2bGateway(w, r, auth)
			return
		}
		if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" {
			s.e2bSignedFiles(w, r)
			return
		}
		if auth == nil {
			s.countCall(sandbox.Caller{Operator: true}) // usage.go
			r = r.WithContext(sandbox.WithCaller(r.Context(), sandbox.Caller{Operator: true}))
			s.auditAPI(r) // audit.go
			s.mux.ServeHTTP(w, r)
			return
		}
		_, pattern := s.mux.Handler(r)
		how := s.access[pattern] // a path no route matches: byKey, then the fallback's 404/501
		if how == public {
			s.mux.ServeHTTP(w, r)
			return
		}
		fail := writeError
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			fail = writeE2BError
		}
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			key = r.Header.Get("X-API-KEY")
		}
		var caller sandbox.Caller
		var err error
		if key != "" {
			caller, err = auth.Authenticate(r.Context(), key)
		} else if caller, ok, err = s.sessionCaller(r); !ok && err == nil { // session.go: the console's cookie
			fail(w, fmt.Errorf("an API key is required (Authorization: Bearer <key>, or X-API-KEY): %w", errdefs.ErrUnauthenticated))
			return
		}
		if err != nil {
			fail(w, err)
			return
		}
		caller.Operator = false
		if how == socketOnly {
			fail(w, fmt.Errorf("%s is for the operator on the daemon's unix socket only, not API keys: %w", pattern, errdefs.ErrPermissionDenied))
			return
		}
		s.countCall(caller) // usage.go
		r = r.WithContext(sandbox.WithCaller(r.Context(), caller))
		s.auditAPI(r) // audit.go
		if key == "" {
			sessionHeaders(w) // session.go: sandbox bytes never run as the console
		}
		s.mux.ServeHTTP(w, r)
	}))
}

// owned guards every route that names a sandbox ({id}), native (errors as native) and
// E2B: it passes the request on only when the caller may use that sandbox
// (sandbox.Caller.MayUse: the operator and admin keys every one, an API key those it
// created and team sandboxes) and, unless the route is a use route, manage it (owners.go:
// mayAccess; else 403). A sandbox the caller may not use answers as one that does not
// exist, 404 with the same message, so a key learns nothing of other callers' sandboxes. The operator's requests
// pass unlooked-at (it may use every sandbox, and read the events of deleted ones).
func (s *Server) owned(h http.HandlerFunc, native bool) http.HandlerFunc {
	fail := writeE2BError
	if native {
		fail = writeError
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if native {
			// Names and ID prefixes become IDs here, for every native route (names.go).
			if err := s.resolvePath(r); err != nil {
				fail(w, err)
				return
			}
		}
		c := sandbox.CallerFrom(r.Context())
		if c.Operator {
			s.touch(r)
			h(w, r)
			return
		}
		id := r.PathValue("id")
		sb, err := s.sandboxes.Get(r.Context(), id)
		if err == nil {
			err = mayAccess(c, sb, r.Pattern) // owners.go: use or manage route
		}
		if err != nil {
			fail(w, err)
			return
		}
		s.touch(r)
		h(w, r)
	}
}

// visible returns the sandboxes the caller of ctx may use (sandbox.Caller.MayUse).
func (s *Server) visible(ctx context.Context) ([]*sandbox.Sandbox, error) {
	list, err := s.sandboxes.List(ctx)
	if err != nil {
		return nil, err
	}
	c := sandbox.CallerFrom(ctx)
	return slices.DeleteFunc(list, func(sb *sandbox.Sandbox) bool { return !c.MayUse(sb) }), nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req v1.CreateSandboxRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	timeout, err := timeoutSeconds("timeout_seconds", req.TimeoutSeconds)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := checkRepoCaller(sandbox.CallerFrom(r.Context()), req.Repo); err != nil {
		writeError(w, err)
		return
	}
	pol, err := WithAsk(FromAPIPolicy(req.Policy), req.Ask, req.AskWaitSeconds)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sandbox.CreateOptions{
		Runtime: req.Runtime, Template: req.Template, Repo: req.Repo, User: req.User, Env: req.Env,
		Limits: sandbox.Limits{
			MemoryBytes: req.MemoryBytes, CPUs: req.CPUs, Pids: req.Pids, DiskBytes: req.DiskBytes,
			Nofile: req.Nofile, IOBps: req.IOBps, IOIops: req.IOIops,
		},
		Timeout:           timeout,
		Metadata:          req.Metadata,
		Policy:            pol,
		Credentials:       fromAPICredentials(req.Credentials),
		AgentBranchPrefix: req.AgentBranchPrefix,
		GitProtected:      req.GitProtected,
		FromSnapshot:      req.FromSnapshot,
		Idle:              seconds(req.IdleSeconds),
		DeleteAfter:       seconds(req.DeleteAfterSeconds),
		Archive:           req.Archive,
		Name:              req.Name,
		Labels:            req.Labels,
		Users:             fromAPIUsers(req.Users), // users.go
		Visibility:        req.Visibility,          // owners.go
	}
	if err := s.applyTier(req.Tier, &opts); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.sandboxes.Create(r.Context(), opts)
	if err == nil {
		err = s.templateStartOrDelete(r.Context(), sb) // an E2B template's start command (e2b_templates.go)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ToAPI(sb))
}

// checkRepoCaller refuses repo (a directory on the daemon's host, read as its owner and
// later written by moat export) to every caller but the operator: an API key is a client
// that need not have any access to the host's files. It is pure.
func checkRepoCaller(c sandbox.Caller, repo string) error {
	if repo != "" && !c.Operator {
		return fmt.Errorf("repo (a directory on the daemon's host) is for the operator (the daemon's unix socket), not API keys: %w", errdefs.ErrPermissionDenied)
	}
	return nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	list, err := s.filtered(r.Context(), r.URL.Query()["filter"])
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]v1.Sandbox, 0, len(list))
	for _, sb := range list {
		out = append(out, ToAPI(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxes.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ToAPI(sb))
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	if err := s.sandboxes.Delete(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) lifecycle(op func(Sandboxes, context.Context, string) (*sandbox.Sandbox, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, err := op(s.sandboxes, r.Context(), r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ToAPI(sb))
	}
}

func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request) {
	evs, err := s.events.Events(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, evs)
}

// envdTarget is the context key carrying the resolved sandbox for the envd rewrite.
type envdTarget struct{}

type envdDest struct {
	id, token, rest string
	// e2b: an E2B client's request through the gateway. It brings its own access token
	// and envd user header, and its errors are E2B-shaped.
	e2b bool
}

// envd forwards /v1/sandboxes/{id}/envd/<rest> to the sandbox's moat-init, adding the
// sandbox's access token. Only running sandboxes are reachable.
func (s *Server) envd(w http.ResponseWriter, r *http.Request) {
	s.forwardRunning(w, r, "/"+r.PathValue("rest"), "not running")
}

// forwardRunning forwards r to path rest of the moat-init of the sandbox the request names
// (resumed if idle, held in use until the answer ends); a sandbox that is not running
// answers 409 with why.
func (s *Server) forwardRunning(w http.ResponseWriter, r *http.Request, rest, why string) {
	sb, release, err := s.sandboxes.Acquire(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	if sb.State != sandbox.StateRunning {
		writeError(w, fmt.Errorf("sandbox %s is %s, %s: %w", sb.ID, sb.State, why, errdefs.ErrConflict))
		return
	}
	s.forward(w, r, envdDest{id: sb.ID, token: sb.AccessToken, rest: rest})
}

// forward sends r to the moat-init of dest.id.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, dest envdDest) {
	fail := writeError
	if dest.e2b {
		fail = writeE2BError
	}
	var body []byte
	if dest.rest != "/files" && dest.rest != "/moat/tar" { // file bodies stream
		// An RPC request is one message: read it whole, so the upstream request has a
		// fixed length and is written completely before its response streams back. (A
		// chunked body still being copied upstream after this handler returned could break
		// the upstream connection that the next request of a kept-alive client reuses.)
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, maxRPCBytes+1))
		if err != nil {
			fail(w, fmt.Errorf("reading request: %v: %w", err, errdefs.ErrInvalidArgument))
			return
		}
		if len(body) > maxRPCBytes {
			fail(w, fmt.Errorf("request larger than %d bytes: %w", maxRPCBytes, errdefs.ErrInvalidArgument))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
	}
	r = s.auditEnvd(r, dest.id, dest.rest, body) // audit.go: exec and file writes
	s.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), envdTarget{}, dest)))
}

func (s *Server) rewriteEnvd(pr *httputil.ProxyRequest) {
	dest := pr.In.Context().Value(envdTarget{}).(envdDest)
	pr.Out.URL = &url.URL{Scheme: "http", Host: dest.id, Path: dest.rest, RawQuery: pr.In.URL.RawQuery}
	pr.Out.Host = dest.id
	// API keys never reach a sandbox.
	pr.Out.Header.Del("X-Api-Key")
	if dest.e2b {
		// The E2B client authenticates to moat-init itself (X-Access-Token, or a signed
		// URL) and names its envd user (Authorization: Basic); any other Authorization
		// (a Bearer API key) stays here.
		for _, h := range []string{e2bSandboxHeader, e2bPortHeader, UserHeader} {
			pr.Out.Header.Del(h)
		}
		if a := pr.Out.Header.Get("Authorization"); a != "" && !strings.HasPrefix(a, "Basic ") {
			pr.Out.Header.Del("Authorization")
		}
		return
	}
	pr.Out.Header.Set("X-Access-Token", dest.token)
	// The caller's credentials for the daemon never reach the sandbox. The user to run as
	// travels as X-Moat-User and becomes envd's Basic user header.
	pr.Out.Header.Del("Authorization")
	if u := pr.In.Header.Get(UserHeader); u != "" {
		pr.Out.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u+":")))
	}
	pr.Out.Header.Del(UserHeader)
}

// maxRPCBytes bounds one envd RPC request forwarded by the daemon (moat-init's own limit).
const maxRPCBytes = 32 << 20

// UserHeader names the user an envd call through the native API runs as.
const UserHeader = "X-Moat-User"

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	list, err := s.templates.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.withE2BBuilds(list)) // e2b_templates.go
}

// progressStream starts an NDJSON answer of a long operation: progress sends one line
// (flushed at once); enc writes the last line, with the result or the error.
func progressStream(w http.ResponseWriter) (enc *json.Encoder, progress func(string)) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc = json.NewEncoder(w)
	return enc, func(msg string) {
		_ = enc.Encode(v1.Progress{Message: msg})
		_ = rc.Flush()
	}
}

// templateOp runs a long template operation, streaming progress as NDJSON lines; the last
// line carries the result or the error.
func (s *Server) templateOp(op func(Templates, context.Context, v1.TemplateRequest, func(string)) (v1.Template, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req v1.TemplateRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		enc, progress := progressStream(w)
		t, err := op(s.templates, r.Context(), req, progress)
		if err != nil {
			s.log.Error("template operation failed", "name", req.Name, "err", err)
			_ = enc.Encode(v1.Progress{Done: true, Error: ClientMessage(err)})
			return
		}
		_ = enc.Encode(v1.Progress{Done: true, Result: &t})
	}
}

// createKey serves POST /v1/apikeys, with an optional body {"secrets": [...], "max":
// {...}}: the secrets the key may bind and its maxima.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	var req v1.APIKeyRequest
	if err := DecodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkSecretNames(req.Secrets); err != nil {
		writeError(w, err)
		return
	}
	var max v1.KeyMaxima
	if req.Max != nil {
		max = *req.Max
	}
	if err := checkKeyMaxima(max); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkKeyOwner(req); err != nil { // owners.go
		writeError(w, err)
		return
	}
	ka, canApprove := s.keys.(keyApprover) // approvals.go
	if req.Approver && !canApprove {
		writeError(w, fmt.Errorf("approver keys: %w", errdefs.ErrNotImplemented))
		return
	}
	k, err := s.keys.CreateAPIKey(r.Context(), req.Secrets, max)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Approver {
		if err := ka.SetAPIKeyApprover(r.Context(), k.ID, true); err != nil {
			writeError(w, err)
			return
		}
		k.Approver = true
	}
	if err := s.setKeyOwner(r.Context(), &k, req); err != nil { // owners.go
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, k)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := s.keys.ListAPIKeys(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, keys)
}

// setKeySecrets serves PUT /v1/apikeys/{id}/secrets {"secrets": [...]}: the key's grants
// become exactly these.
func (s *Server) setKeySecrets(w http.ResponseWriter, r *http.Request) {
	var req v1.APIKeyRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkSecretNames(req.Secrets); err != nil {
		writeError(w, err)
		return
	}
	k, err := s.keys.SetAPIKeySecrets(r.Context(), r.PathValue("id"), req.Secrets)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

// setKeyMax serves PUT /v1/apikeys/{id}/max {...}: the key's maxima become exactly these
// (zero fields: none of its own).
func (s *Server) setKeyMax(w http.ResponseWriter, r *http.Request) {
	var max v1.KeyMaxima
	if err := decode(r, &max); err != nil {
		writeError(w, err)
		return
	}
	if err := checkKeyMaxima(max); err != nil {
		writeError(w, err)
		return
	}
	k, err := s.keys.SetAPIKeyMax(r.Context(), r.PathValue("id"), max)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

// checkKeyMaxima refuses negative or non-finite maxima.
func checkKeyMaxima(m v1.KeyMaxima) error {
	if m.MemoryBytes < 0 || m.Pids < 0 || m.DiskBytes < 0 || !(m.CPUs >= 0) || math.IsInf(m.CPUs, 0) {
		return fmt.Errorf("API key maxima %+v: each must be positive, or 0 for none: %w", m, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkSecretNames checks the names an API key is granted.
func checkSecretNames(names []string) error {
	for _, n := range names {
		if err := secrets.CheckName(n); err != nil {
			return fmt.Errorf("granting secrets: %w", err)
		}
	}
	return nil
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) {
	if err := s.keys.DeleteAPIKey(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) runDoctor(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.doctor(r.Context()))
}

// ToAPI converts a sandbox record to its wire form (without the access token).
func ToAPI(sb *sandbox.Sandbox) v1.Sandbox {
	out := v1.Sandbox{
		ID: sb.ID, State: string(sb.State), Runtime: sb.Runtime, Template: sb.Template, Repo: sb.Repo,
		User: sb.User, Env: sb.Env, Metadata: sb.Metadata, Error: sb.Error,
		CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, ExpiresAt: sb.ExpiresAt,
		OOMKills: sb.OOMKills, LastOOMAt: sb.LastOOMAt,
		Snapshot: sb.Snapshot, ForkOf: sb.ForkOf,
		Limits: v1.Limits{MemoryBytes: sb.Limits.MemoryBytes, CPUs: sb.Limits.CPUs, Pids: sb.Limits.Pids, DiskBytes: sb.Limits.DiskBytes,
			Nofile: sb.Limits.Nofile, IOBps: sb.Limits.IOBps, IOIops: sb.Limits.IOIops},
		Lifecycle: toAPILifecycle(sb),
		Name:      sb.Name, Labels: sb.Labels,
		PidsLimitHits: sb.PidsLimitHits, LastPidsLimitAt: sb.LastPidsLimitAt,
	}
	if sb.InUserNS() {
		out.HostUID = sb.HostIDs().Host
	}
	out.Users, out.SharedGroups = toAPIUsers(sb.Users, sb.SharedGroups) // users.go
	toAPIOwner(sb, &out)                                                // owners.go
	out.Policy = ToAPIPolicy(sb.EgressPolicy())
	out.AgentBranchPrefix = sb.GitPrefix()
	out.GitProtected = sandbox.GitProtectedRefuse
	if sb.GitSettings().Hold {
		out.GitProtected = sandbox.GitProtectedHold
	}
	out.Tier, out.GitPush = sb.Tier, "agent-branch"
	if sb.GitSettings().NoPush {
		out.GitPush = sandbox.GitPushNone
	}
	for _, c := range sb.Credentials {
		cred := v1.Credential{Secret: c.Secret, Hosts: c.Hosts, Header: c.Header, Template: c.Template, PathPrefix: c.PathPrefix, Methods: c.Methods, PlainHTTP: c.PlainHTTP}
		if g := c.GitHub; g != nil {
			cred.GitHub = &v1.GitHubScope{Repositories: g.Repositories, Permissions: g.Permissions}
		}
		cred.PlaceholderHeader, cred.Approve = c.PlaceholderHeader, c.Approve
		out.Credentials = append(out.Credentials, cred)
	}
	return out
}

// DecodeOptional is decode for a body that may be absent (empty): v stays as it is.
func DecodeOptional(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return decode(r, v)
}

// decode reads one JSON object of v's type: unknown fields and anything after the object
// are refused.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("request body: want one JSON value, found more after it: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// classes is the one mapping from error classes to HTTP status and wire code.
var classes = []struct {
	err    error
	status int
	code   string
}{
	{errdefs.ErrNotFound, http.StatusNotFound, "not_found"},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
	{errdefs.ErrAlreadyExists, http.StatusConflict, "already_exists"},
	{errdefs.ErrConflict, http.StatusConflict, "conflict"},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	// 429 as in gRPC and Connect: the request is fine, the room for it is not there now.
	{errdefs.ErrResourceExhausted, http.StatusTooManyRequests, "resource_exhausted"},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{errdefs.ErrPermissionDenied, http.StatusForbidden, "permission_denied"},
	{errdefs.ErrMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed"},
	{errdefs.ErrNotImplemented, http.StatusNotImplemented, "unimplemented"},
}

// StatusOf maps an error to its HTTP status and wire code.
func StatusOf(err error) (int, string) {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// ClientMessage is the text a client sees: classified errors carry messages written for
// the client; anything else is marked as internal but keeps its text, because today every
// client is an operator of the daemon's host (unix socket, or an API key they made) and
// needs the cause (a failed mount, a runtime's error). Revisit when the API serves
// untrusted clients: then the detail belongs in the daemon log only.
func ClientMessage(err error) string {
	if _, code := StatusOf(err); code == "internal" {
		return "internal error: " + err.Error()
	}
	return err.Error()
}

func writeError(w http.ResponseWriter, err error) {
	status, code := StatusOf(err)
	noteErrorClass(w, code) // metrics.go
	writeJSON(w, status, v1.Error{Code: code, Message: ClientMessage(err)})
}

func fromAPICredentials(in []v1.Credential) []sandbox.Credential {
	var out []sandbox.Credential
	for _, c := range in {
		cred := sandbox.Credential{Secret: c.Secret, Hosts: c.Hosts, Header: c.Header, Template: c.Template, PathPrefix: c.PathPrefix, Methods: c.Methods, PlainHTTP: c.PlainHTTP}
		if g := c.GitHub; g != nil {
			cred.GitHub = &sandbox.GitHubScope{Repositories: g.Repositories, Permissions: g.Permissions}
		}
		cred.PlaceholderHeader, cred.Approve = c.PlaceholderHeader, c.Approve
		out = append(out, cred)
	}
	return out
}
