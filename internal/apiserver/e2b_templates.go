package apiserver

// E2B templates as code (docs/e2b-templates.md): the template build API of E2B's cloud as
// the e2b SDK's Template().…build() calls it — request a build, the upload handshake of
// COPY's files, start it with the steps, poll its status and logs — plus template listing,
// alias lookup, tags and delete. Builds run on internal/build in the daemon (E2BTemplates).

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/build"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// E2BTemplates builds E2B templates and starts their start commands (the daemon's).
type E2BTemplates interface {
	// Uploads are kept per scope (e2bUploadScope: one API key's, or the operator's).
	FilesPresent(scope, hash string) bool
	PutFiles(ctx context.Context, scope, hash string, r io.Reader, max int64) error
	Build(ctx context.Context, scope, name string, t *build.E2BTemplate, progress func(string)) (v1.Template, *v1.BuildReport, error)
	Start(ctx context.Context, sandboxID string, labels map[string]string, timeout time.Duration) error
	Tag(ctx context.Context, name, tagged string) error
	// BuildSteps builds a template from a steps file (moat template build --steps).
	BuildSteps(ctx context.Context, req v1.StepsRequest, progress func(string)) (v1.Template, *v1.BuildReport, error)
}

// SetE2BTemplates installs E2B template builds (nil: the routes answer 501).
func (s *Server) SetE2BTemplates(t E2BTemplates) { s.e2bt.impl = t }

// Limits of the upload handshake.
const (
	e2bUploadTTL      = 15 * time.Minute
	e2bUploadMaxBody  = 1 << 30 // what the PUT may send (a gzipped tar)
	e2bUploadMaxFiles = 4 << 30 // what it may unpack to
	e2bStartTimeout   = 60 * time.Second
	e2bMaxBuilds      = 256 // build records kept (oldest finished dropped first)
)

// e2bTemplateState is the builds this server started and its outstanding upload URLs.
type e2bTemplateState struct {
	impl    E2BTemplates
	records E2BBuildRecords // nil: build records live in memory only
	mu      sync.Mutex
	builds  map[string]*e2bBuild  // by build ID
	uploads map[string]e2bUpload  // by token
	meta    map[string]e2bTmplRec // by template: what POST /v3/templates asked
	waking  map[string]*wakeEntry // by sandbox: fresh starts under way (acquireStarting)
}

type e2bUpload struct {
	scope, template, hash string
	expires               time.Time
}

type e2bTmplRec struct {
	buildID     string
	cpu, memory int
	tags        []string
	updated     time.Time
}

// e2bBuild is one build: requested (waiting), running (building), ready or error.
type e2bBuild struct {
	id, template string
	scope        string // whose uploads COPY reads (e2bUploadScope)
	owner        string // the template's owner the build records (e2bBuildOwner)
	requester    string // who asked: the API key's id, or "operator"
	tags         []string
	cpu, memory  int
	status       string
	logs         []e2bLogEntry
	reason       *e2bBuildReason
	step         string   // the E2B step index of the step running ("base" before)
	output       []string // the running step's last output lines
	created      time.Time
	saveMu       sync.Mutex // orders this build's writes to records
	saved        time.Time  // when it was last written (under the state's mu)
}

type e2bLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

type e2bBuildReason struct {
	Message    string        `json:"message"`
	Step       string        `json:"step,omitempty"`
	LogEntries []e2bLogEntry `json:"logEntries"`
}

func (s *Server) e2bTemplateRoutes() []route {
	s.e2bt = &e2bTemplateState{builds: map[string]*e2bBuild{}, uploads: map[string]e2bUpload{}, meta: map[string]e2bTmplRec{}, waking: map[string]*wakeEntry{}}
	return []route{
		{"POST /v3/templates", s.e2bRequestBuild, byKey},
		{"POST /v2/templates/{template}/builds/{build}", s.e2bStartBuild, byKey},
		{"GET /templates/{template}/builds/{build}/status", s.e2bBuildStatus, byKey},
		{"GET /templates/{template}/files/{hash}", s.e2bFileLink, byKey},
		// Signed (an unguessable single-use token the daemon keeps), size-limited, no key:
		// the SDK sends only the URL and the headers the answer above gave.
		{"PUT /e2b/uploads/{token}", s.e2bUpload, public},
		{"GET /templates", s.e2bListTemplates, byKey},
		{"GET /templates/{a}/{b}", s.e2bTemplateGet2, byKey}, // aliases/{alias}, {id}/tags
		{"POST /templates/tags", s.e2bAssignTags, byKey},
		{"DELETE /templates/tags", s.e2bRemoveTags, byKey},
		{"DELETE /templates/{template}", s.e2bDeleteTemplate, byKey},
		// Reads its copy sources from the daemon's host, as a Dockerfile build does.
		{"POST /v1/templates/steps", s.buildSteps, socketOnly},
	}
}

// e2bUploadScope names whose uploaded files a caller sees: an API key's own, or the
// operator's. Uploads are named by the hash the SDK computes, which the daemon cannot check
// (it covers the sender's file modes and sizes), so one key's upload must never stand in for
// another's files of the same claimed hash. Pure.
func e2bUploadScope(c sandbox.Caller) string {
	if c.APIKey == "" {
		return "operator"
	}
	h := sha256.Sum256([]byte(c.APIKey))
	return "key-" + hex.EncodeToString(h[:10])
}

func (s *Server) e2bTemplatesReady(w http.ResponseWriter) bool {
	if s.e2bt == nil || s.e2bt.impl == nil {
		writeE2BError(w, fmt.Errorf("E2B template builds are not available: %w", errdefs.ErrNotImplemented))
		return false
	}
	return true
}

// e2bSplitName splits an E2B template name "name[:tag]" into the moat template and the
// tag ("" for none or "default"). Pure.
func e2bSplitName(ref string) (name, tag string) {
	name, tag, _ = strings.Cut(ref, ":")
	if tag == "default" {
		tag = ""
	}
	return name, tag
}

// e2bTagTemplate is the moat template that holds tag of template name: name.tag. Pure.
func e2bTagTemplate(name, tag string) string {
	if tag == "" {
		return name
	}
	return name + "." + tag
}

// e2bTaggedName maps what an E2B create names (name:tag) to the moat template. Pure.
func e2bTaggedName(ref string) string {
	if !strings.Contains(ref, ":") {
		return ref
	}
	return e2bTagTemplate(e2bSplitName(ref))
}

// e2bMayWrite decides whether E2B caller c may build over, tag, untag or delete template
// name: never a name the E2B mapping gives (base); a template that does not exist yet, yes;
// one that exists only when the E2B builder made it (source "e2b …": an API key cannot
// replace the templates the operator built or pulled) and c is its owner (label
// moat.e2b.owner: the API key that first built it), an admin key or the operator.
// Templates stay readable and usable by every key. Pure.
func e2bMayWrite(name string, existing *v1.Template, aliases map[string]string, c sandbox.Caller) error {
	if _, ok := aliases[name]; ok {
		return fmt.Errorf("template %q is an E2B name the daemon maps to a moat template (moat serve --e2b-template): %w", name, errdefs.ErrPermissionDenied)
	}
	if existing == nil {
		return nil
	}
	if existing.Builtin || !strings.HasPrefix(existing.Source, "e2b ") {
		return fmt.Errorf("template %q exists and was not built through the E2B API (source %q): only the operator may replace it: %w",
			name, existing.Source, errdefs.ErrPermissionDenied)
	}
	if c.Operator || c.Admin {
		return nil
	}
	if owner := existing.Labels[build.LabelE2BOwner]; c.APIKey == "" || owner != c.APIKey {
		return fmt.Errorf("template %q belongs to another API key: only the key that first built it, an admin key or the operator may build over, tag or delete it (it stays usable by every key): %w",
			name, errdefs.ErrPermissionDenied)
	}
	return nil
}

// e2bBuildOwner is the owner a build of a template records: an existing template's owner
// stays (an admin's or the operator's rebuild does not take it over; one without an owner
// stays the operator's), a new template is c's. Always non-empty: a template would
// otherwise inherit its base's owner label. Pure.
func e2bBuildOwner(existing *v1.Template, c sandbox.Caller) string {
	if existing != nil {
		if o := existing.Labels[build.LabelE2BOwner]; o != "" {
			return o
		}
		return "operator"
	}
	if c.APIKey == "" {
		return "operator"
	}
	return c.APIKey
}

// templateGetter looks up one template (the daemon's templates.Get): cheaper than List,
// which reads every template's manifest.
type templateGetter interface {
	Get(ctx context.Context, name string) (v1.Template, error)
}

// e2bExisting returns those of names that are templates (one lookup each).
func (s *Server) e2bExisting(ctx context.Context, names ...string) ([]string, error) {
	var out []string
	for _, n := range names {
		if n == "" || slices.Contains(out, n) {
			continue
		}
		t, err := s.e2bFindTemplate(ctx, n)
		if err != nil {
			return nil, err
		}
		if t != nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// e2bFindTemplate returns template name, nil when there is none.
func (s *Server) e2bFindTemplate(ctx context.Context, name string) (*v1.Template, error) {
	if g, ok := s.templates.(templateGetter); ok {
		t, err := g.Get(ctx, name)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &t, nil
	}
	list, err := s.templates.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i], nil
		}
	}
	return nil, nil
}

func newBuildID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// e2bRequestBuild serves POST /v3/templates: {name, tags, cpuCount, memoryMB} → a build ID.
func (s *Server) e2bRequestBuild(w http.ResponseWriter, r *http.Request) {
	if !s.e2bTemplatesReady(w) {
		return
	}
	var req struct {
		Name     string   `json:"name"`
		Alias    string   `json:"alias"`
		Tags     []string `json:"tags"`
		CPUCount int      `json:"cpuCount"`
		MemoryMB int      `json:"memoryMB"`
	}
	if err := DecodeE2B(r, &req); err != nil {
		writeE2BError(w, err)
		return
	}
	name, tag := e2bSplitName(req.Name)
	if name == "" {
		name = req.Alias
	}
	tags := slices.Clone(req.Tags)
	if tag != "" {
		tags = append(tags, tag)
	}
	if req.CPUCount < 0 || req.CPUCount > 256 || req.MemoryMB < 0 || req.MemoryMB > 1<<20 {
		writeE2BError(w, fmt.Errorf("cpuCount %d or memoryMB %d out of range: %w", req.CPUCount, req.MemoryMB, errdefs.ErrInvalidArgument))
		return
	}
	c := sandbox.CallerFrom(r.Context())
	owner := ""
	for _, n := range append([]string{name}, tagNames(name, tags)...) {
		existing, err := s.e2bFindTemplate(r.Context(), n)
		if err == nil {
			err = e2bMayWrite(n, existing, s.e2b.Templates, c)
		}
		if owner == "" {
			owner = e2bBuildOwner(existing, c)
		}
		if err == nil {
			err = v1.ValidTemplateName(n)
		}
		if err != nil {
			writeE2BError(w, err)
			return
		}
	}
	b := &e2bBuild{id: newBuildID(), template: name, scope: e2bUploadScope(c), owner: owner, requester: e2bBuildOwner(nil, c), tags: tags, cpu: req.CPUCount, memory: req.MemoryMB, status: "waiting", step: "base", created: time.Now()}
	st := s.e2bt
	st.mu.Lock()
	st.builds[b.id] = b
	st.pruneLocked()
	st.mu.Unlock()
	s.e2bSaveBuild(b, true)
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": b.id, "names": []string{name}, "aliases": []string{name},
		"tags": tags, "public": false,
	})
}

func tagNames(name string, tags []string) []string {
	var out []string
	for _, t := range tags {
		if t != "" && t != "default" {
			out = append(out, e2bTagTemplate(name, t))
		}
	}
	return out
}

// pruneLocked drops the oldest finished builds beyond e2bMaxBuilds, and expired uploads.
func (st *e2bTemplateState) pruneLocked() {
	now := time.Now()
	for k, u := range st.uploads {
		if now.After(u.expires) {
			delete(st.uploads, k)
		}
	}
	for len(st.builds) > e2bMaxBuilds {
		var oldest *e2bBuild
		for _, b := range st.builds {
			if (b.status == "ready" || b.status == "error") && (oldest == nil || b.created.Before(oldest.created)) {
				oldest = b
			}
		}
		if oldest == nil {
			return
		}
		delete(st.builds, oldest.id)
	}
}

// e2bFileLink serves GET /templates/{template}/files/{hash}: {present: true} when the
// files of hash were uploaded already, else {present: false, url} (an upload URL on this
// daemon, valid once, for e2bUploadTTL).
func (s *Server) e2bFileLink(w http.ResponseWriter, r *http.Request) {
	if !s.e2bTemplatesReady(w) {
		return
	}
	hash := r.PathValue("hash")
	if !build.ValidFilesHash(hash) {
		writeE2BError(w, fmt.Errorf("files hash %q: want 64 hex digits: %w", hash, errdefs.ErrInvalidArgument))
		return
	}
	scope := e2bUploadScope(sandbox.CallerFrom(r.Context()))
	if s.e2bt.impl.FilesPresent(scope, hash) {
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	tok := make([]byte, 32)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	s.e2bt.mu.Lock()
	s.e2bt.pruneLocked()
	s.e2bt.uploads[token] = e2bUpload{scope: scope, template: r.PathValue("template"), hash: hash, expires: time.Now().Add(e2bUploadTTL)}
	s.e2bt.mu.Unlock()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": scheme + "://" + r.Host + "/e2b/uploads/" + token})
}

// e2bUpload serves PUT /e2b/uploads/{token}: the token is taken (single use) before the
// body is read; the body is at most e2bUploadMaxBody and unpacks to at most
// e2bUploadMaxFiles.
func (s *Server) e2bUpload(w http.ResponseWriter, r *http.Request) {
	if !s.e2bTemplatesReady(w) {
		return
	}
	st := s.e2bt
	st.mu.Lock()
	u, ok := st.uploads[r.PathValue("token")]
	delete(st.uploads, r.PathValue("token"))
	st.mu.Unlock()
	if !ok || time.Now().After(u.expires) {
		writeE2BError(w, fmt.Errorf("upload URL is unknown, used or expired: %w", errdefs.ErrPermissionDenied))
		return
	}
	if r.ContentLength > e2bUploadMaxBody {
		writeE2BError(w, fmt.Errorf("upload of %d bytes is over the limit of %d: %w", r.ContentLength, e2bUploadMaxBody, errdefs.ErrResourceExhausted))
		return
	}
	body := http.MaxBytesReader(w, r.Body, e2bUploadMaxBody)
	if err := st.impl.PutFiles(r.Context(), u.scope, u.hash, body, e2bUploadMaxFiles); err != nil {
		s.log.Warn("E2B template upload failed", "template", u.template, "hash", u.hash, "err", err)
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// e2bStartBuild serves POST /v2/templates/{template}/builds/{build}: the steps
// (TemplateBuildStartV2). The build runs in the background; 202.
func (s *Server) e2bStartBuild(w http.ResponseWriter, r *http.Request) {
	if !s.e2bTemplatesReady(w) {
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2<<20))
	if err != nil {
		writeE2BError(w, fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	tmpl, err := build.ParseE2BTemplate(data)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	st := s.e2bt
	st.mu.Lock()
	b, ok := st.builds[r.PathValue("build")]
	if ok && (b.template != r.PathValue("template") || b.scope != e2bUploadScope(sandbox.CallerFrom(r.Context()))) {
		ok = false // another caller's build is not there for this one
	}
	if ok && b.status != "waiting" {
		st.mu.Unlock()
		writeE2BError(w, fmt.Errorf("build %s was started already: %w", b.id, errdefs.ErrConflict))
		return
	}
	if ok {
		b.status = "building"
	}
	st.mu.Unlock()
	if !ok {
		writeE2BError(w, fmt.Errorf("build %s of template %s: %w", r.PathValue("build"), r.PathValue("template"), errdefs.ErrNotFound))
		return
	}
	for _, step := range tmpl.Steps {
		if step.Type == "COPY" && !st.impl.FilesPresent(b.scope, step.FilesHash) {
			st.finish(b, fmt.Errorf("the files of COPY %s (hash %s) were not uploaded", step.Args[0], step.FilesHash), "")
			s.e2bSaveBuild(b, true)
			w.WriteHeader(http.StatusAccepted)
			return
		}
	}
	s.e2bSaveBuild(b, true)
	go s.e2bRunBuild(b, tmpl)
	w.WriteHeader(http.StatusAccepted)
}

// e2bRunBuild runs build b, turning the engine's progress into E2B log entries: "step
// N/M: …" lines set the step (E2B numbers steps from 1, as its stack traces do), the
// steps' output lines are kept for an error's reason, and cached steps say CACHED.
func (s *Server) e2bRunBuild(b *e2bBuild, tmpl *build.E2BTemplate) {
	st := s.e2bt
	progress := func(msg string) {
		st.mu.Lock()
		step := b.step
		defer func() {
			changed := b.step != step
			st.mu.Unlock()
			s.e2bSaveBuild(b, changed) // each step's start, else at most every e2bSaveEvery
		}()
		if n, rest, ok := e2bStepOf(msg); ok {
			if n <= len(tmpl.Steps) {
				b.step = strconv.Itoa(n)
			} else {
				b.step = "finalize"
			}
			if strings.HasPrefix(rest, "using cached layer") {
				msg = "CACHED " + msg
			} else if !strings.HasPrefix(rest, "done in") {
				b.output = nil
			}
		} else if strings.HasPrefix(msg, "  ") {
			b.output = append(b.output, strings.TrimPrefix(msg, "  "))
			if len(b.output) > 50 {
				b.output = b.output[len(b.output)-50:]
			}
		}
		b.logs = append(b.logs, e2bLogEntry{Timestamp: time.Now().UTC(), Level: "info", Message: msg, Step: b.step})
	}
	tmpl.CPUCount, tmpl.MemoryMB, tmpl.Owner = b.cpu, b.memory, b.owner
	_, _, err := st.impl.Build(context.Background(), b.scope, b.template, tmpl, progress)
	if err == nil {
		for _, tn := range tagNames(b.template, b.tags) {
			if err = st.impl.Tag(context.Background(), b.template, tn); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.log.Warn("E2B template build failed", "template", b.template, "build", b.id, "err", err)
	}
	st.finish(b, err, strings.Join(b.outputCopy(&st.mu), "\n"))
	s.e2bSaveBuild(b, true)
	if err == nil {
		st.mu.Lock()
		st.meta[b.template] = e2bTmplRec{buildID: b.id, cpu: b.cpu, memory: b.memory, tags: b.tags, updated: time.Now()}
		st.mu.Unlock()
	}
}

func (b *e2bBuild) outputCopy(mu *sync.Mutex) []string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(b.output)
}

// finish ends build b: ready, or error with err's message and the failing step's output.
func (st *e2bTemplateState) finish(b *e2bBuild, err error, output string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err == nil {
		b.status = "ready"
		b.logs = append(b.logs, e2bLogEntry{Timestamp: time.Now().UTC(), Level: "info", Message: "Build finished: template " + b.template + " is ready", Step: "finalize"})
		return
	}
	msg := ClientMessage(err)
	if output != "" {
		msg += "\n" + output
	}
	entry := e2bLogEntry{Timestamp: time.Now().UTC(), Level: "error", Message: msg, Step: b.step}
	b.status = "error"
	b.logs = append(b.logs, entry)
	b.reason = &e2bBuildReason{Message: msg, Step: b.step, LogEntries: []e2bLogEntry{entry}}
}

// e2bStepOf reads the engine's "step N/M: rest" progress lines. Pure.
func e2bStepOf(msg string) (n int, rest string, ok bool) {
	tail, found := strings.CutPrefix(msg, "step ")
	if !found {
		return 0, "", false
	}
	nm, rest, found := strings.Cut(tail, ": ")
	if !found {
		return 0, "", false
	}
	ns, _, found := strings.Cut(nm, "/")
	if !found {
		return 0, "", false
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 {
		return 0, "", false
	}
	return n, rest, true
}

// e2bBuildStatus serves GET /templates/{template}/builds/{build}/status?logsOffset=N.
func (s *Server) e2bBuildStatus(w http.ResponseWriter, r *http.Request) {
	if !s.e2bTemplatesReady(w) {
		return
	}
	off := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeE2BError(w, fmt.Errorf("logsOffset %q: %w", v, errdefs.ErrInvalidArgument))
			return
		}
		off = n
	}
	st := s.e2bt
	st.mu.Lock()
	b, ok := st.builds[r.PathValue("build")]
	if !ok || b.template != r.PathValue("template") {
		st.mu.Unlock()
		writeE2BError(w, fmt.Errorf("build %s of template %s: %w", r.PathValue("build"), r.PathValue("template"), errdefs.ErrNotFound))
		return
	}
	logs := []e2bLogEntry{}
	if off < len(b.logs) {
		logs = slices.Clone(b.logs[off:])
	}
	out := map[string]any{"buildID": b.id, "templateID": b.template, "status": b.status, "logEntries": logs, "logs": []string{}}
	if b.reason != nil {
		out["reason"] = *b.reason
	}
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// e2bTemplateInfo is E2B's Template (GET /templates).
type e2bTemplateInfo struct {
	TemplateID    string    `json:"templateID"`
	BuildID       string    `json:"buildID"`
	BuildStatus   string    `json:"buildStatus"`
	BuildCount    int       `json:"buildCount"`
	CPUCount      int       `json:"cpuCount"`
	MemoryMB      int       `json:"memoryMB"`
	DiskSizeMB    int       `json:"diskSizeMB"`
	EnvdVersion   string    `json:"envdVersion"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	CreatedBy     *struct{} `json:"createdBy"`
	LastSpawnedAt *string   `json:"lastSpawnedAt"`
	Names         []string  `json:"names"`
	Aliases       []string  `json:"aliases"`
	Public        bool      `json:"public"`
	SpawnCount    int       `json:"spawnCount"`
}

// e2bListTemplates serves GET /templates: every moat template, with what this server
// knows of its E2B builds (ID, CPU and memory asked) and the builds still running.
func (s *Server) e2bListTemplates(w http.ResponseWriter, r *http.Request) {
	list, err := s.templates.List(r.Context())
	if err != nil {
		writeE2BError(w, err)
		return
	}
	out := []e2bTemplateInfo{}
	var meta map[string]e2bTmplRec
	var running []*e2bBuild
	if s.e2bt != nil {
		s.e2bt.mu.Lock()
		meta = maps.Clone(s.e2bt.meta)
		for _, b := range s.e2bt.builds {
			if b.status == "building" || b.status == "waiting" {
				running = append(running, b)
			}
		}
		s.e2bt.mu.Unlock()
	}
	seen := map[string]bool{}
	for _, t := range list {
		m := meta[t.Name]
		seen[t.Name] = true
		out = append(out, e2bTemplateInfo{
			TemplateID: t.Name, BuildID: m.buildID, BuildStatus: "ready", BuildCount: 1,
			CPUCount: max(m.cpu, 1), MemoryMB: max(m.memory, 512), EnvdVersion: EnvdVersion,
			CreatedAt: t.Created, UpdatedAt: t.Created, Names: []string{t.Name}, Aliases: []string{t.Name},
		})
	}
	for _, b := range running {
		if seen[b.template] {
			continue
		}
		out = append(out, e2bTemplateInfo{
			TemplateID: b.template, BuildID: b.id, BuildStatus: b.status, CPUCount: max(b.cpu, 1), MemoryMB: max(b.memory, 512),
			EnvdVersion: EnvdVersion, CreatedAt: b.created, UpdatedAt: b.created, Names: []string{b.template}, Aliases: []string{b.template},
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bTemplateGet2 serves GET /templates/aliases/{alias} (200 {templateID, public} when a
// template or E2B name exists, else 404) and GET /templates/{id}/tags.
func (s *Server) e2bTemplateGet2(w http.ResponseWriter, r *http.Request) {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "aliases":
		name := e2bTaggedName(b)
		if m, ok := s.e2b.Templates[name]; ok {
			name = m
		}
		t, err := s.e2bFindTemplate(r.Context(), name)
		if err == nil && t == nil {
			err = fmt.Errorf("template %q: %w", b, errdefs.ErrNotFound)
		}
		if err != nil {
			writeE2BError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"templateID": b, "public": false})
	case b == "tags":
		list, err := s.templates.List(r.Context())
		if err != nil {
			writeE2BError(w, err)
			return
		}
		out := []map[string]any{}
		for _, t := range list {
			tag, ok := strings.CutPrefix(t.Name, a+".")
			if ok && t.Source == "e2b tag of "+a {
				out = append(out, map[string]any{"tag": tag, "buildID": "", "createdAt": t.Created})
			}
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeE2BError(w, fmt.Errorf("GET %s: %w", r.URL.Path, errdefs.ErrNotFound))
	}
}

// e2bAssignTags serves POST /templates/tags {target: "name[:tag]", tags}.
func (s *Server) e2bAssignTags(w http.ResponseWriter, r *http.Request) {
	if !s.e2bTemplatesReady(w) {
		return
	}
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := DecodeE2B(r, &req); err != nil {
		writeE2BError(w, err)
		return
	}
	name, tag := e2bSplitName(req.Target)
	src := e2bTagTemplate(name, tag)
	c := sandbox.CallerFrom(r.Context())
	// Tagging is a change of the template: its owner's (the tags inherit its owner label).
	existing, err := s.e2bFindTemplate(r.Context(), src)
	if err == nil && existing == nil {
		err = fmt.Errorf("template %q: %w", req.Target, errdefs.ErrNotFound)
	}
	if err == nil {
		err = e2bMayWrite(src, existing, s.e2b.Templates, c)
	}
	if err != nil {
		writeE2BError(w, err)
		return
	}
	for _, tn := range tagNames(name, req.Tags) {
		existing, err := s.e2bFindTemplate(r.Context(), tn)
		if err == nil {
			err = e2bMayWrite(tn, existing, s.e2b.Templates, c)
		}
		if err == nil {
			err = s.e2bt.impl.Tag(r.Context(), src, tn)
		}
		if err != nil {
			writeE2BError(w, err)
			return
		}
	}
	s.e2bt.mu.Lock()
	id := s.e2bt.meta[name].buildID
	s.e2bt.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": id, "tags": req.Tags})
}

// e2bRemoveTags serves DELETE /templates/tags {name, tags}.
func (s *Server) e2bRemoveTags(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := DecodeE2B(r, &req); err != nil {
		writeE2BError(w, err)
		return
	}
	name, _ := e2bSplitName(req.Name)
	for _, tn := range tagNames(name, req.Tags) {
		if err := s.e2bRemove(r.Context(), tn, true); err != nil { // a tag goes even while sandboxes use it
			writeE2BError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bRemove removes template name for an E2B caller (e2bMayWrite decides); unless force,
// it refuses while sandboxes, pools or snapshots use it.
func (s *Server) e2bRemove(ctx context.Context, name string, force bool) error {
	existing, err := s.e2bFindTemplate(ctx, name)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	if err := e2bMayWrite(name, existing, s.e2b.Templates, sandbox.CallerFrom(ctx)); err != nil {
		return err
	}
	if s.templateAdmin == nil {
		return fmt.Errorf("template removal is not available: %w", errdefs.ErrNotImplemented)
	}
	_, err = s.templateAdmin.Remove(ctx, name, force)
	return err
}

// e2bDeleteTemplate serves DELETE /templates/{template}: the SDK's deleteSnapshot (an ID
// snap-…, or a snapshot's name) and template deletion share the route.
func (s *Server) e2bDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("template")
	t, err := s.e2bFindTemplate(r.Context(), e2bTaggedName(name))
	if err != nil {
		writeE2BError(w, err)
		return
	}
	if t == nil || strings.HasPrefix(name, "snap-") {
		s.e2bDeleteSnapshot(w, r)
		return
	}
	if err := s.e2bRemove(r.Context(), t.Name, false); err != nil {
		writeE2BError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bTemplateStart runs the start command of sb's template, when it has one, and waits
// for its ready check (called by e2bCreate once the sandbox exists).
func (s *Server) e2bTemplateStart(ctx context.Context, sb *sandbox.Sandbox) error {
	if s.e2bt == nil || s.e2bt.impl == nil || sb.Template == "" {
		return nil
	}
	t, err := s.e2bFindTemplate(ctx, sb.Template)
	if err != nil || t == nil || (t.Labels[build.LabelE2BStart] == "" && t.Labels[build.LabelE2BReady] == "") {
		return err
	}
	return s.e2bt.impl.Start(ctx, sb.ID, t.Labels, e2bStartTimeout)
}

// templateStartOrDelete runs the start command of the template new sandbox sb was
// created from (an E2B create, or a native POST /v1/sandboxes) and waits for its ready
// check; when it fails, sb is deleted (the create fails with the command's reason).
func (s *Server) templateStartOrDelete(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.State != sandbox.StateRunning {
		return nil // created without starting: a later start does not run it (docs)
	}
	err := s.e2bTemplateStart(ctx, sb)
	if err != nil {
		_ = s.sandboxes.Delete(context.WithoutCancel(ctx), sb.ID)
	}
	return err
}

// acquireStarting is Sandboxes.Acquire for the gateway, signed file URLs and previews:
// when it starts sb afresh (stopped for idleness or by its timeout with autoResume; not a
// thaw, which keeps the processes), it runs the start command of sb's template and waits
// for its ready check before the request goes on. Requests waking the same sandbox at
// once wait for the first, so the command runs once.
func (s *Server) acquireStarting(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, func(), error) {
	st := s.e2bt
	if sb.State != sandbox.StateStopped || st == nil || st.impl == nil {
		return s.sandboxes.Acquire(ctx, sb.ID)
	}
	unlock := st.wakeLock(sb.ID)
	defer unlock()
	cur, err := s.sandboxes.Get(ctx, sb.ID)
	if err != nil {
		return nil, func() {}, err
	}
	got, release, err := s.sandboxes.Acquire(ctx, sb.ID)
	if err != nil || cur.State != sandbox.StateStopped || got.State != sandbox.StateRunning {
		return got, release, err
	}
	if err := s.e2bTemplateStart(ctx, got); err != nil {
		release()
		return nil, func() {}, err
	}
	return got, release, nil
}

// e2bWakeLocked takes sb's wake lock (as acquireStarting does) for an E2B connect and
// returns sb as it is under it.
func (s *Server) e2bWakeLocked(ctx context.Context, sb *sandbox.Sandbox) (func(), *sandbox.Sandbox, error) {
	if s.e2bt == nil {
		return func() {}, sb, nil
	}
	unlock := s.e2bt.wakeLock(sb.ID)
	cur, err := s.sandboxes.Get(ctx, sb.ID)
	if err != nil {
		return unlock, nil, err
	}
	return unlock, cur, nil
}

// wakeLock serializes acquireStarting's fresh starts of sandbox id.
func (st *e2bTemplateState) wakeLock(id string) (unlock func()) {
	st.mu.Lock()
	w := st.waking[id]
	if w == nil {
		w = &wakeEntry{}
		st.waking[id] = w
	}
	w.n++
	st.mu.Unlock()
	w.mu.Lock()
	return func() {
		w.mu.Unlock()
		st.mu.Lock()
		if w.n--; w.n == 0 {
			delete(st.waking, id)
		}
		st.mu.Unlock()
	}
}

type wakeEntry struct {
	mu sync.Mutex
	n  int // holders and waiters
}

// e2bTemplateLimits gives a create from an E2B-built template the CPU and memory the
// template's build asked for (cpuCount, memoryMB), where the create names none; a tier
// applied after still bounds them.
func (s *Server) e2bTemplateLimits(ctx context.Context, name string, opts *sandbox.CreateOptions) error {
	if name == "" {
		return nil
	}
	t, err := s.e2bFindTemplate(ctx, name)
	if err != nil || t == nil {
		return err
	}
	if n, err := strconv.Atoi(t.Labels[build.LabelE2BCPU]); err == nil && n > 0 && opts.Limits.CPUs == 0 {
		opts.Limits.CPUs = float64(n)
	}
	if n, err := strconv.ParseInt(t.Labels[build.LabelE2BMemory], 10, 64); err == nil && n > 0 && opts.Limits.MemoryBytes == 0 {
		opts.Limits.MemoryBytes = n << 20
	}
	return nil
}

// buildSteps serves POST /v1/templates/steps: progress as NDJSON lines, the last with the
// template and the build report, or the error (as POST /v1/templates/dockerfile).
func (s *Server) buildSteps(w http.ResponseWriter, r *http.Request) {
	if s.e2bt == nil || s.e2bt.impl == nil {
		writeError(w, fmt.Errorf("building templates from a steps file is not available: %w", errdefs.ErrNotImplemented))
		return
	}
	var req v1.StepsRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	enc, progress := progressStream(w)
	t, rep, err := s.e2bt.impl.BuildSteps(r.Context(), req, progress)
	if err != nil {
		s.log.Warn("template build failed", "name", req.Name, "err", err)
		_ = enc.Encode(v1.Progress{Done: true, Error: ClientMessage(err)})
		return
	}
	_ = enc.Encode(v1.Progress{Done: true, Result: &t, Build: rep})
}

// withE2BBuilds adds to a template list (GET /v1/templates, moat template ls) the latest
// E2B build of each template when it is not ready: waiting, building (with its step) or
// failed (with the step), as an entry whose Source says so and that has no layers.
func (s *Server) withE2BBuilds(list []v1.Template) []v1.Template {
	if s.e2bt == nil {
		return list
	}
	st := s.e2bt
	st.mu.Lock()
	defer st.mu.Unlock()
	latest := map[string]*e2bBuild{}
	for _, b := range st.builds {
		if l := latest[b.template]; l == nil || b.created.After(l.created) {
			latest[b.template] = b
		}
	}
	for _, name := range slices.Sorted(maps.Keys(latest)) {
		b := latest[name]
		var state string
		switch b.status {
		case "ready":
			continue
		case "waiting":
			state = "waiting for its steps"
		case "building":
			state = "building, step " + b.step
		case "error":
			state = "failed at step " + b.step
		}
		list = append(list, v1.Template{Name: name, Source: "e2b build " + b.id[:8] + ": " + state, Created: b.created})
	}
	return list
}
