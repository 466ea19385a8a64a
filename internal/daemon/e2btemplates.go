package daemon

// E2B templates as code (docs/e2b-templates.md): the files E2B's SDK uploads for COPY
// steps, builds of E2B templates on internal/build, and the start command with its ready
// check when a sandbox starts from such a template.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/build"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/tarcopy"
	"github.com/moatdev/moat/sdk"
)

// e2bTemplates implements apiserver.E2BTemplates.
type e2bTemplates struct {
	t   templates
	dir string // the uploaded files: dir/<filesHash>/, unpacked
	mu  *sync.Mutex
}

func newE2BTemplates(t templates, dataDir string) e2bTemplates {
	return e2bTemplates{t: t, dir: filepath.Join(dataDir, "e2b-files"), mu: &sync.Mutex{}}
}

// scopeDir is the directory of scope's uploads ("" when scope is not one the API server
// makes: operator, key-<hex>).
func (e e2bTemplates) scopeDir(scope string) string {
	if scope != "operator" && !validKeyScope(scope) {
		return ""
	}
	return filepath.Join(e.dir, scope)
}

func validKeyScope(s string) bool {
	h, ok := strings.CutPrefix(s, "key-")
	if !ok || len(h) != 20 {
		return false
	}
	for _, c := range h {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// FilesPresent says whether scope uploaded the files of hash already.
func (e e2bTemplates) FilesPresent(scope, hash string) bool {
	dir := e.scopeDir(scope)
	if dir == "" || !build.ValidFilesHash(hash) {
		return false
	}
	p := filepath.Join(dir, hash)
	fi, err := os.Lstat(p)
	if err != nil || !fi.IsDir() {
		return false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // in use: collectUploads keeps it
	return true
}

// e2bUploadsKept is how long uploaded files nobody asked for are kept.
const e2bUploadsKept = 7 * 24 * time.Hour

// collectUploads removes, in dir (one scope's uploads), the uploads nobody asked for
// within e2bUploadsKept (FilesPresent marks them used) and temporary directories of
// uploads interrupted over an hour ago.
func (e e2bTemplates) collectUploads(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, d := range ents {
		fi, err := d.Info()
		if err != nil || !fi.IsDir() {
			continue
		}
		age := now.Sub(fi.ModTime())
		tmp := strings.HasPrefix(d.Name(), ".upload-")
		if tmp && age > time.Hour || !tmp && build.ValidFilesHash(d.Name()) && age > e2bUploadsKept {
			if err := os.RemoveAll(filepath.Join(dir, d.Name())); err != nil {
				e.t.log.Warn("removing old E2B template uploads", "dir", d.Name(), "err", err)
			}
		}
	}
}

// PutFiles unpacks an upload (a tar, gzipped or not) as the files of hash: into a fresh
// directory first, renamed into place once whole. At most max bytes are unpacked.
func (e e2bTemplates) PutFiles(ctx context.Context, scope, hash string, r io.Reader, max int64) error {
	dir := e.scopeDir(scope)
	if dir == "" || !build.ValidFilesHash(hash) {
		return fmt.Errorf("upload scope %q, files hash %q: %w", scope, hash, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, ".upload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer root.Close()
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("upload: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		defer zr.Close()
		in = zr
	}
	if _, err := tarcopy.Extract(ctx, root, in, tarcopy.ExtractOptions{MaxBytes: max}); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.collectUploads(dir, time.Now())
	if e.FilesPresent(scope, hash) {
		return nil // a concurrent upload of the same files won
	}
	return os.Rename(tmp, filepath.Join(dir, hash))
}

// Build builds template name from an E2B template (its COPY sources are scope's uploads).
func (e e2bTemplates) Build(ctx context.Context, scope, name string, tmpl *build.E2BTemplate, progress func(string)) (v1.Template, *v1.BuildReport, error) {
	dir := e.scopeDir(scope)
	if dir == "" {
		return v1.Template{}, nil, fmt.Errorf("upload scope %q: %w", scope, errdefs.ErrInvalidArgument)
	}
	if err := buildableName(name); err != nil {
		return v1.Template{}, nil, err
	}
	from, steps, err := tmpl.Translate()
	if err != nil {
		return v1.Template{}, nil, err
	}
	breq := build.Request{Name: name, From: from, Steps: steps, Progress: progress}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return v1.Template{}, nil, err
	}
	abs, err := filepath.Abs(dir) // a relative --data is the daemon's own choice
	if err != nil {
		return v1.Template{}, nil, err
	}
	cx, done, err := openContext(abs) // the uploads, as a build context
	if err != nil {
		return v1.Template{}, nil, err
	}
	defer done()
	breq.Context = cx
	return e.t.buildWith(ctx, breq, "e2b template")
}

// BuildSteps builds template req.Name from a steps file; copy reads req.Context.
func (e e2bTemplates) BuildSteps(ctx context.Context, req v1.StepsRequest, progress func(string)) (v1.Template, *v1.BuildReport, error) {
	if err := buildableName(req.Name); err != nil {
		return v1.Template{}, nil, err
	}
	tmpl, err := build.ParseStepsFile([]byte(req.Steps))
	if err != nil {
		return v1.Template{}, nil, err
	}
	tmpl.Owner = "operator" // API keys other than admin keys may not change it
	from, steps, err := tmpl.Translate()
	if err != nil {
		return v1.Template{}, nil, err
	}
	breq := build.Request{Name: req.Name, From: from, Steps: steps, Progress: progress}
	if req.Context != "" {
		cx, done, err := openContext(req.Context)
		if err != nil {
			return v1.Template{}, nil, err
		}
		defer done()
		breq.Context = cx
	}
	// "e2b …": the E2B API may rebuild it (apiserver e2bMayWrite), as a template it made.
	return e.t.buildWith(ctx, breq, "e2b steps "+req.File)
}

// buildWith runs breq holding its name's lock (as BuildFile does).
func (t templates) buildWith(ctx context.Context, breq build.Request, source string) (v1.Template, *v1.BuildReport, error) {
	var rep *build.Report
	tmpl, err := t.serialized(ctx, breq.Name, breq.Progress, func() (v1.Template, error) {
		be := &buildBackend{t: t, name: breq.Name, source: source}
		defer be.Close()
		var err error
		if rep, err = build.Build(ctx, be, breq); err != nil {
			return v1.Template{}, err
		}
		return be.result, nil
	})
	t.changed()
	if err != nil {
		return v1.Template{}, nil, err
	}
	return tmpl, toAPIReport(rep), nil
}

// e2bReadyEvery is how often the ready check runs while a sandbox starts.
const e2bReadyEvery = 200 * time.Millisecond

// Start runs a template's start command in sandbox id (in the background, for the
// sandbox's life) and returns once its ready check passes; without a ready check, once
// the command has started. It fails when the check has not passed within timeout, or
// when the start command exits first, with the command's last output.
func (e e2bTemplates) Start(ctx context.Context, id string, labels map[string]string, timeout time.Duration) error {
	start, ready := labels[build.LabelE2BStart], labels[build.LabelE2BReady]
	if start == "" && ready == "" {
		return nil
	}
	out := &tailBuffer{max: 4096}
	exited := make(chan error, 1)
	if start != "" {
		go func() {
			// Not the request's context: the command lives as long as the sandbox.
			code, err := e.t.client.Exec(context.Background(), id, sdk.ExecRequest{
				Cmd: "/bin/sh", Args: []string{"-c", start}, Workdir: labels[build.LabelE2BWorkdir], Stdout: out, Stderr: out,
			})
			if err == nil {
				err = fmt.Errorf("exited with code %d", code)
			}
			exited <- err
		}()
	}
	if ready == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(e2bReadyEvery)
	defer tick.Stop()
	fail := func(why string) error {
		msg := fmt.Sprintf("the template's start command %q: %s", start, why)
		if o := strings.TrimSpace(out.String()); o != "" {
			msg += "; its output: " + o
		}
		return fmt.Errorf("%s: %w", msg, errdefs.ErrUnavailable)
	}
	for {
		code, err := e.t.client.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", ready}})
		if err == nil && code == 0 {
			return nil
		}
		select {
		case err := <-exited:
			return fail(fmt.Sprintf("%v before its ready check (%s) passed", err, ready))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fail(fmt.Sprintf("its ready check (%s) did not pass within %s", ready, timeout))
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Tag stores template name again as tagged (its layers are shared).
func (e e2bTemplates) Tag(ctx context.Context, name, tagged string) error {
	if err := v1.ValidTemplateName(tagged); err != nil {
		return err
	}
	st, release, err := e.t.s.BuildBase(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	_, err = e.t.serialized(ctx, tagged, nil, func() (v1.Template, error) {
		if _, err := e.t.s.Template(ctx, tagged); err == nil {
			if err := e.t.s.DeleteTemplate(ctx, tagged); err != nil {
				return v1.Template{}, err
			}
		}
		info, err := e.t.s.WriteBuiltTemplate(tagged, st, "e2b tag of "+name)
		return toAPITemplate(info), err
	})
	e.t.changed()
	return err
}

// Get returns template name as List would, reading only its manifest (apiserver's
// templateGetter: an E2B create looks up one template, not all).
func (t templates) Get(ctx context.Context, name string) (v1.Template, error) {
	info, err := t.s.TemplateInfo(ctx, name)
	if err != nil {
		return v1.Template{}, err
	}
	return toAPITemplate(info), nil
}
