package daemon

// Template removal, Dockerfile builds and one operation per template name at a time
// (docs/internals.md, "Template builds").

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/build"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/storage"
	"github.com/moatdev/moat/sdk"
)

// nameLocks serializes the operations that write one template: a second build, import or
// pull of a name waits for the first.
type nameLocks struct {
	mu   sync.Mutex
	busy map[string]chan struct{} // closed when the holder is done
}

// lock takes name, telling progress when it has to wait; it honours ctx while waiting.
func (l *nameLocks) lock(ctx context.Context, name string, progress func(string)) (func(), error) {
	said := false
	for {
		l.mu.Lock()
		if l.busy == nil {
			l.busy = map[string]chan struct{}{}
		}
		ch, held := l.busy[name]
		if !held {
			done := make(chan struct{})
			l.busy[name] = done
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.busy, name)
				l.mu.Unlock()
				close(done)
			}, nil
		}
		l.mu.Unlock()
		if !said && progress != nil {
			progress(fmt.Sprintf("waiting for another build of template %s to finish", name))
			said = true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// serialized runs op holding name's lock.
func (t templates) serialized(ctx context.Context, name string, progress func(string), op func() (v1.Template, error)) (v1.Template, error) {
	unlock, err := t.locks.lock(ctx, name, progress)
	if err != nil {
		return v1.Template{}, err
	}
	defer unlock()
	return op()
}

// Remove deletes template name. Unless force, it refuses (ErrConflict, naming them) while
// a sandbox (any state), a warm pool or a snapshot uses it. Forced, it deletes the warm
// pool's idle sandboxes of the template and removes the template; everything else is left
// alone: running sandboxes keep their mounted layers (removed once unmounted), and stopped
// sandboxes and snapshots of it cannot start or be restored until a template of that name
// exists again (they are listed in the result). Layers other templates share stay.
func (t templates) Remove(ctx context.Context, name string, force bool) (v1.TemplateRemoval, error) {
	unlock, err := t.locks.lock(ctx, name, nil)
	if err != nil {
		return v1.TemplateRemoval{}, err
	}
	defer unlock()
	if _, err := t.s.Template(ctx, name); err != nil && name != storage.HostTemplate {
		return v1.TemplateRemoval{}, err
	}
	users, warm, err := t.usersOf(ctx, name)
	if err != nil {
		return v1.TemplateRemoval{}, err
	}
	out := v1.TemplateRemoval{Name: name, Users: users}
	if len(users) > 0 && !force {
		return out, fmt.Errorf("template %s is used by %s (moat template rm --force removes it anyway): %w",
			name, strings.Join(users, ", "), errdefs.ErrConflict)
	}
	if err := t.s.DeleteTemplate(ctx, name); err != nil {
		return out, err
	}
	for _, id := range warm {
		if err := t.m.Delete(context.WithoutCancel(ctx), id); err != nil {
			t.log.Warn("deleting a warm sandbox of a removed template", "sandbox", id, "err", err)
		}
	}
	t.changed()
	return out, nil
}

// usersOf lists what uses template name ("sandbox ID", "warm pool RUNTIME", "snapshot ID")
// and the warm pool's idle sandboxes of it.
func (t templates) usersOf(ctx context.Context, name string) (users, warm []string, err error) {
	sbs, err := t.m.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, sb := range sbs {
		if sb.Template != name || sb.State == sandbox.StateDeleting {
			continue
		}
		if sb.Warm {
			warm = append(warm, sb.ID)
			continue
		}
		users = append(users, "sandbox "+sb.ID)
	}
	for _, p := range t.m.PoolStats() {
		if p.Template == name && (p.Want > 0 || p.Ready > 0) {
			users = append(users, "warm pool "+p.Runtime+":"+p.Template)
		}
	}
	snaps, err := t.m.ListSnapshots(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range snaps {
		if s.Template == name {
			users = append(users, "snapshot "+s.ID)
		}
	}
	return users, warm, nil
}

// BuildFile builds template req.Name from a Dockerfile (internal/build).
func (t templates) BuildFile(ctx context.Context, req v1.DockerfileRequest, progress func(string)) (v1.Template, *v1.BuildReport, error) {
	if err := buildableName(req.Name); err != nil {
		return v1.Template{}, nil, err
	}
	df, err := build.ParseDockerfile([]byte(req.Dockerfile))
	if err != nil {
		return v1.Template{}, nil, err
	}
	breq := build.Request{Name: req.Name, From: df.From, Steps: df.Steps, Progress: progress}
	if req.Context != "" {
		cx, done, err := openContext(req.Context)
		if err != nil {
			return v1.Template{}, nil, err
		}
		defer done()
		breq.Context = cx
	}
	return t.buildWith(ctx, breq, "dockerfile "+req.File)
}

func toAPIReport(r *build.Report) *v1.BuildReport {
	out := &v1.BuildReport{Cached: r.Cached, Built: r.Built, Seconds: r.Seconds}
	for _, s := range r.Steps {
		out.Steps = append(out.Steps, v1.BuildStep{N: s.N, Step: s.Step, Layer: s.Key, Cached: s.Cached})
	}
	return out
}

// buildPolicy is a build sandbox's egress policy: the package registries of the daemon's
// configuration (the "registries" set, downloads only), nothing else.
func buildPolicy() *policy.Spec {
	return &policy.Spec{Phases: map[string]policy.Rules{"build": {Allow: []string{"registries"}}}, Phase: "build"}
}

// buildBackend implements build.Backend for one build on the daemon's storage and
// sandboxes.
type buildBackend struct {
	t        templates
	name     string
	source   string
	base     storage.BuildState
	releases []func()
	result   v1.Template
}

func (b *buildBackend) Close() {
	for _, r := range b.releases {
		r()
	}
}

func (b *buildBackend) Base(ctx context.Context, from string, progress func(string)) (build.Base, error) {
	name := from
	if strings.ContainsAny(from, ":/@") {
		// An image reference: pulled as a template of its own (kept, reused next time).
		name = storage.ImageTemplateName(from)
		if err := v1.ValidTemplateName(name); err != nil {
			return build.Base{}, fmt.Errorf("FROM %s: %w", from, err)
		}
		if _, err := b.t.s.Template(ctx, name); err == nil {
			progress(fmt.Sprintf("FROM %s: using template %s", from, name))
		} else {
			progress(fmt.Sprintf("FROM %s: pulling it as template %s", from, name))
			if _, err := b.t.Pull(ctx, v1.TemplateRequest{Name: name, Ref: from}, progress); err != nil {
				return build.Base{}, fmt.Errorf("FROM %s: %w", from, err)
			}
		}
	} else if name == b.name {
		return build.Base{}, fmt.Errorf("FROM %s: a template cannot be built from itself: %w", from, errdefs.ErrInvalidArgument)
	}
	st, release, err := b.t.s.BuildBase(ctx, name)
	if err != nil {
		return build.Base{}, fmt.Errorf("FROM %s: %w (a local template, or an image reference such as docker.io/library/debian:bookworm)", from, err)
	}
	b.releases = append(b.releases, release)
	b.base = st
	return build.Base{Name: name, Identity: st.Identity, Env: st.Env, User: st.User, Workdir: st.Workdir,
		Labels: st.Labels, Cmd: st.Cmd, Entrypoint: st.Entrypoint}, nil
}

func (b *buildBackend) stateOf(keys []string) storage.BuildState {
	st := b.base
	for _, k := range keys {
		st = storage.WithBuildLayers(st, k)
	}
	return st
}

func (b *buildBackend) Cached(ctx context.Context, _ build.Base, keys []string, key string) bool {
	ok, release := b.t.s.HasBuildLayers(key, b.stateOf(keys))
	if ok {
		b.releases = append(b.releases, release)
	}
	return ok
}

func (b *buildBackend) Step(ctx context.Context, _ build.Base, keys []string, key string, fn func(context.Context, build.Sandbox) error) error {
	st := b.stateOf(keys)
	staged := stagedPrefix + randomHex(6)
	unstage, err := b.t.s.Stage(staged, st)
	if err != nil {
		return err
	}
	defer unstage()
	off := time.Duration(0)
	octx := sandbox.WithCaller(ctx, sandbox.Caller{Operator: true})
	sb, err := b.t.m.Create(octx, sandbox.CreateOptions{
		Runtime: sandbox.DefaultRuntime, Template: staged, Limits: b.t.m.DefaultLimits(),
		Policy: buildPolicy(), Idle: &off, DeleteAfter: &off,
		Metadata: map[string]string{"moat.build": b.name},
	})
	if err != nil {
		return fmt.Errorf("starting the build sandbox: %w", err)
	}
	defer func() {
		if err := b.t.m.Delete(context.WithoutCancel(ctx), sb.ID); err != nil {
			b.t.log.Warn("deleting a build sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	rootUID := sb.HostIDs().Host
	if err := fn(ctx, &buildSandbox{t: b.t, id: sb.ID, rootUID: rootUID}); err != nil {
		return err
	}
	release, err := b.t.s.CaptureBuildLayers(ctx, sb.ID, rootUID, key, st)
	if err != nil {
		return fmt.Errorf("capturing the step's layer: %w", err)
	}
	b.releases = append(b.releases, release)
	return nil
}

func (b *buildBackend) Commit(ctx context.Context, name string, _ build.Base, keys []string, img build.Image) error {
	st := b.stateOf(keys)
	st.Env, st.User, st.Workdir = img.Env, img.User, img.Workdir
	st.Labels, st.Cmd, st.Entrypoint = img.Labels, img.Cmd, img.Entrypoint
	if len(st.Labels) == 0 {
		st.Labels = nil
	}
	info, err := b.t.s.WriteBuiltTemplate(name, st, b.source)
	if err != nil {
		return err
	}
	b.result = toAPITemplate(info)
	return nil
}

// buildSandbox is a running build sandbox.
type buildSandbox struct {
	t       templates
	id      string
	rootUID uint32
}

func (s *buildSandbox) Exec(ctx context.Context, e build.Exec) (int, error) {
	return s.t.client.Exec(ctx, s.id, sdk.ExecRequest{
		Cmd: e.Argv[0], Args: e.Argv[1:], User: e.User, Env: e.Env, Workdir: e.Workdir, Stdout: e.Out, Stderr: e.Out,
	})
}

func (s *buildSandbox) Root(ctx context.Context, fn func(root *os.Root, hostID func(int) int) error) error {
	return s.t.m.WithRootfs(ctx, s.id, func(_ *sandbox.Sandbox, root *os.Root) error {
		return fn(root, func(id int) int { return int(s.rootUID) + id })
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stagedPrefix names the templates of build sandboxes (Store.Stage): they exist only while
// the build that made them runs.
const stagedPrefix = "moat-build-"

// removeBuildSandboxes deletes the build sandboxes a previous daemon left behind (it
// stopped or died during a build): sandboxes of a staged template that no stored template
// of that name backs.
func (t templates) removeBuildSandboxes(ctx context.Context) {
	sbs, err := t.m.List(ctx)
	if err != nil {
		t.log.Warn("listing sandboxes for leftover build sandboxes", "err", err)
		return
	}
	for _, sb := range sbs {
		if !strings.HasPrefix(sb.Template, stagedPrefix) || sb.State == sandbox.StateDeleting {
			continue
		}
		if _, err := t.s.Template(ctx, sb.Template); err == nil {
			continue
		}
		t.log.Info("deleting the build sandbox of an interrupted template build", "sandbox", sb.ID, "template", sb.Template)
		if err := t.m.Delete(ctx, sb.ID); err != nil {
			t.log.Warn("deleting a leftover build sandbox", "sandbox", sb.ID, "err", err)
		}
	}
}

// buildableName refuses a build's template name unless it is valid and not the built-in
// host template.
func buildableName(name string) error {
	if err := v1.ValidTemplateName(name); err != nil {
		return err
	}
	if name == storage.HostTemplate {
		return fmt.Errorf("template %s is built in: %w", name, errdefs.ErrAlreadyExists)
	}
	return nil
}

// openContext opens a build's context directory (an absolute path) as a file system
// confined to it (os.Root: no path, link or ".." leaves it); done closes it.
func openContext(dir string) (cx fs.ReadLinkFS, done func(), err error) {
	if !strings.HasPrefix(dir, "/") {
		return nil, nil, fmt.Errorf("build context %q must be an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("build context: %v: %w", err, errdefs.ErrNotFound)
	}
	cx, ok := root.FS().(fs.ReadLinkFS)
	if !ok {
		root.Close()
		return nil, nil, fmt.Errorf("build context: no symbolic link support: %w", errdefs.ErrUnavailable)
	}
	return cx, func() { root.Close() }, nil
}
