package storage

// Layers of `moat template build` (internal/build drives these; docs/internals.md,
// "Template builds"). A build step's result is one layer per part of the base template,
// named bld-<key>-p<N> (key: the step's cache key; N: the part's index), captured from the
// upper directories of the build sandbox's drive. A built template's manifest lists those
// layers on top of its base's: a stored base's layer IDs are copied into it (the built
// template stands alone: deleting the base keeps the layers it shares), the host template
// is named as Base (its layers are paths of the host, resolved at each start).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apiv1 "github.com/moatdev/moat/api/v1"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// BuildState is a template as a build sees it: its base and, per part of the base, the
// build's layers (IDs, first = topmost) on top of the base's own.
type BuildState struct {
	// Base is "" (a self-contained manifest: Parts hold every layer) or HostTemplate.
	Base       string
	Parts      []BuildPart
	Env        []string
	User       string
	Workdir    string
	Labels     map[string]string
	Cmd        []string
	Entrypoint []string
	// Identity names the base's content for cache keys (its layer IDs, or the host
	// template's /etc layer).
	Identity string
}

// BuildPart is one part of a BuildState.
type BuildPart struct {
	Target string
	Layers []string
}

// BuildBase returns template name as the base of a build. Its layers are marked in use by
// the build until release is called (no other template's replacement collects them).
func (s *Store) BuildBase(ctx context.Context, name string) (BuildState, func(), error) {
	if name == HostTemplate {
		t, err := s.hostTemplate()
		if err != nil {
			return BuildState{}, nil, err
		}
		st := BuildState{Base: HostTemplate, Identity: "host " + filepath.Base(t.Parts[0].Layers[0])}
		for _, p := range t.Parts {
			st.Parts = append(st.Parts, BuildPart{Target: p.Target})
		}
		return st, func() {}, nil
	}
	m, err := s.readManifest(name)
	if err != nil {
		return BuildState{}, nil, err
	}
	st := m.buildState()
	st.Parts = nil
	var ids []string
	for _, p := range m.Parts {
		st.Parts = append(st.Parts, BuildPart{Target: p.Target, Layers: append([]string(nil), p.Layers...)})
		ids = append(ids, p.Target+"="+strings.Join(p.Layers, ","))
	}
	st.Identity = "template " + m.Base + " " + strings.Join(ids, " ")
	return st, s.markAll(st.layerIDs()), nil
}

func (st BuildState) layerIDs() []string {
	var ids []string
	for _, p := range st.Parts {
		ids = append(ids, p.Layers...)
	}
	return ids
}

// markAll marks ids as being built (Cleanup and collection leave them alone) and returns
// the function that unmarks them.
func (s *Store) markAll(ids []string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var marked []string
	for _, id := range ids {
		if !s.building[id] {
			s.building[id] = true
			marked = append(marked, id)
		}
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range marked {
			delete(s.building, id)
		}
	}
}

// BuildLayerID is the layer of step key for part index i.
func BuildLayerID(key string, i int) string { return fmt.Sprintf("bld-%s-p%d", key, i) }

// HasBuildLayers reports whether the layers of step key exist for every part of st; when
// they do they are marked in use until the returned release is called.
func (s *Store) HasBuildLayers(key string, st BuildState) (bool, func()) {
	var ids []string
	for i := range st.Parts {
		id := BuildLayerID(key, i)
		if validLayerID(id) != nil {
			return false, func() {}
		}
		ids = append(ids, id)
	}
	release := s.markAll(ids)
	for _, id := range ids {
		if fi, err := s.layers.Lstat(id); err != nil || !fi.IsDir() {
			release()
			return false, func() {}
		}
	}
	return true, release
}

// WithBuildLayers returns st with the layers of step key added on top of each part.
func WithBuildLayers(st BuildState, key string) BuildState {
	out := st
	out.Parts = make([]BuildPart, len(st.Parts))
	for i, p := range st.Parts {
		out.Parts[i] = BuildPart{Target: p.Target, Layers: append([]string{BuildLayerID(key, i)}, p.Layers...)}
	}
	return out
}

// resolveBuild turns st into a sandbox template named name.
func (s *Store) resolveBuild(name string, st BuildState) (sandbox.Template, error) {
	t := sandbox.Template{Name: name, Env: st.Env, User: st.User, Workdir: st.Workdir}
	var base []sandbox.Part
	switch st.Base {
	case "":
	case HostTemplate:
		h, err := s.hostTemplate()
		if err != nil {
			return sandbox.Template{}, err
		}
		base = h.Parts
	default:
		return sandbox.Template{}, fmt.Errorf("template %s: unknown base %q: %w", name, st.Base, errdefs.ErrInvalidArgument)
	}
	if base != nil && len(base) != len(st.Parts) {
		return sandbox.Template{}, fmt.Errorf("template %s: made from another state of template %s (parts differ): rebuild it: %w", name, st.Base, errdefs.ErrUnavailable)
	}
	for i, p := range st.Parts {
		part := sandbox.Part{Target: p.Target}
		for _, id := range p.Layers {
			if validLayerID(id) != nil {
				return sandbox.Template{}, fmt.Errorf("template %s: layer id %q: %w", name, id, errdefs.ErrInvalidArgument)
			}
			fi, err := s.layers.Lstat(id)
			if err != nil || !fi.IsDir() {
				return sandbox.Template{}, fmt.Errorf("template %s: layer %s is missing: %w", name, id, errdefs.ErrUnavailable)
			}
			part.Layers = append(part.Layers, s.layerPath(id))
		}
		if base != nil {
			if base[i].Target != p.Target {
				return sandbox.Template{}, fmt.Errorf("template %s: made from another state of template %s: rebuild it: %w", name, st.Base, errdefs.ErrUnavailable)
			}
			part.Layers = append(part.Layers, base[i].Layers...)
		}
		t.Parts = append(t.Parts, part)
	}
	return t, nil
}

// Stage makes st available as template name to sandboxes created until release is called
// (the build sandboxes of a step); nothing is written to disk, so a crash leaves no
// template behind.
func (s *Store) Stage(name string, st BuildState) (func(), error) {
	if err := apiv1.ValidTemplateName(name); err != nil {
		return nil, err
	}
	t, err := s.resolveBuild(name, st)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.staged == nil {
		s.staged = map[string]sandbox.Template{}
	}
	s.staged[name] = t
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.staged, name)
		s.mu.Unlock()
	}, nil
}

func (s *Store) stagedTemplate(name string) (sandbox.Template, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.staged[name]
	return t, ok
}

// CaptureBuildLayers copies the changes sandbox id (running, its drive mounted) made to
// each part of st into the layers of step key, with the sandbox's uid range (root = host
// uid rootUID) moved back to 0. The drive is frozen while it is read. Each layer is made
// under layers/.tmp-* and renamed when complete; a layer of that key that exists already
// is kept. The new layers stay marked in use until release is called.
func (s *Store) CaptureBuildLayers(ctx context.Context, id string, rootUID uint32, key string, st BuildState) (release func(), err error) {
	if err := validSandboxID(id); err != nil {
		return nil, err
	}
	var ids []string
	for i := range st.Parts {
		ids = append(ids, BuildLayerID(key, i))
	}
	for _, lid := range ids {
		if err := validLayerID(lid); err != nil {
			return nil, err
		}
	}
	release = s.markAll(ids)
	defer func() {
		if err != nil {
			release()
		}
	}()
	drive := s.driveMount(id)
	err = s.frozen(id, func() error {
		for i, p := range st.Parts {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := s.layers.Lstat(ids[i]); err == nil {
				continue
			}
			if err := s.captureUpper(ctx, filepath.Join(drive, driveDirName(p.Target), "upper"), rootUID, ids[i]); err != nil {
				return fmt.Errorf("capturing %s: %w", p.Target, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return release, nil
}

// captureUpper copies the overlay upper directory upper (absent: nothing changed) into
// layer id. cp -a keeps modes, owners, extended attributes (overlayfs's opaque-directory
// marks) and device nodes (its whiteouts), and never follows symbolic links.
func (s *Store) captureUpper(ctx context.Context, upper string, rootUID uint32, id string) error {
	tmp, dir, done, err := s.newTemp("bld")
	if err != nil {
		return err
	}
	defer done()
	if _, err := os.Lstat(upper); err == nil {
		if err := os.Remove(dir); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, "cp", "-a", "--no-target-directory", upper, dir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("copying %s: %v: %s", upper, err, strings.TrimSpace(string(out)))
		}
		if rootUID != 0 {
			if err := shiftIDs(dir, rootUID, 0); err != nil {
				return err
			}
			if err := shiftRoot(dir, rootUID); err != nil {
				return err
			}
		}
		// What every sandbox start writes into its root is not part of the image: the
		// files, then their directories if nothing else is left in them.
		for _, p := range buildIgnored {
			_ = os.Remove(filepath.Join(dir, p))
		}
		for _, p := range buildIgnoredDirs {
			_ = syscall.Rmdir(filepath.Join(dir, p))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.commitLayer(tmp, id)
}

// buildIgnored are files every sandbox start writes into its root (relative to "/"):
// moat-init's copies of the sandbox's egress CA, the machine id, and the runtime's mount
// point for moat-init.
var buildIgnored = [...]string{"etc/moat/ca.pem", "etc/moat/ca-bundle.pem", "etc/machine-id", ".moat/moat-init"}

// buildIgnoredDirs are removed from a captured layer when empty: the directories of
// buildIgnored.
var buildIgnoredDirs = [...]string{"etc/moat", "etc", ".moat"}

// shiftRoot moves dir's own owner (shiftIDs skips the top) from the sandbox's range to 0.
func shiftRoot(dir string, rootUID uint32) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	uid, gid := ownerOf(fi)
	if uid >= rootUID && uid-rootUID < sandbox.IDRangeSize {
		uid -= rootUID
	}
	if gid >= rootUID && gid-rootUID < sandbox.IDRangeSize {
		gid -= rootUID
	}
	return os.Lchown(dir, int(uid), int(gid))
}

// WriteBuiltTemplate stores st as template name (replacing one of that name; the layers
// only the old one used are collected).
func (s *Store) WriteBuiltTemplate(name string, st BuildState, source string) (TemplateInfo, error) {
	if err := s.checkNewName(name); err != nil {
		return TemplateInfo{}, err
	}
	if _, err := s.resolveBuild(name, st); err != nil {
		return TemplateInfo{}, err
	}
	m := &manifest{Name: name, Base: st.Base, Env: st.Env, User: st.User, Workdir: st.Workdir, Source: source, Created: time.Now().UTC(),
		Labels: st.Labels, Cmd: st.Cmd, Entrypoint: st.Entrypoint}
	for _, p := range st.Parts {
		m.Parts = append(m.Parts, manifestPart(p))
	}
	return s.writeManifest(m)
}

func ownerOf(fi fs.FileInfo) (uid, gid uint32) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid, st.Gid
	}
	return 0, 0
}
