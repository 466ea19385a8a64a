package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	apiv1 "github.com/moatdev/moat/api/v1"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// HostTemplate is the name of the built-in template made from the host's own programs.
const HostTemplate = "host"

// manifest is templates/<name>.json.
type manifest struct {
	Name    string         `json:"name"`
	Parts   []manifestPart `json:"parts"`
	Env     []string       `json:"env,omitempty"`
	User    string         `json:"user,omitempty"`
	Workdir string         `json:"workdir,omitempty"`
	// Base is HostTemplate for a template built from it (build.go): Parts then hold the
	// layers on top of the host template's parts, in its order.
	Base    string    `json:"base,omitempty"`
	Source  string    `json:"source"` // "debootstrap bookworm <mirror>", "import <path>", "pull <ref>@<digest>"
	Created time.Time `json:"created"`
	// Labels, Cmd and Entrypoint are recorded from a Dockerfile (sandboxes do not run them).
	Labels     map[string]string `json:"labels,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
}

// manifestPart is one overlay part; Layers are layer IDs under layers/ (first = topmost).
type manifestPart struct {
	Target string   `json:"target"`
	Layers []string `json:"layers"`
}

// TemplateInfo describes one template for listings.
type TemplateInfo struct {
	Name    string
	Source  string
	Builtin bool
	Created time.Time
	Layers  int // number of layer directories over all parts
	// Recorded from a Dockerfile (template build --file).
	Labels     map[string]string
	Cmd        []string
	Entrypoint []string
}

// Template resolves name to its parts with absolute layer paths. An unknown name gives an
// error wrapping errdefs.ErrNotFound whose text lists the templates that exist; a manifest
// whose layer is missing gives ErrUnavailable. The built-in "host" template is always
// available (its layer is synthesized on first use).
func (s *Store) Template(ctx context.Context, name string) (sandbox.Template, error) {
	if name == HostTemplate {
		return s.hostTemplate()
	}
	if t, ok := s.stagedTemplate(name); ok {
		return t, nil
	}
	m, err := s.readManifest(name)
	if err != nil {
		return sandbox.Template{}, err
	}
	if m.Base != "" {
		return s.resolveBuild(name, m.buildState())
	}
	t := sandbox.Template{Name: m.Name, Env: m.Env, User: m.User, Workdir: m.Workdir}
	for _, p := range m.Parts {
		part := sandbox.Part{Target: p.Target}
		for _, id := range p.Layers {
			fi, err := s.layers.Lstat(id)
			if err != nil || !fi.IsDir() {
				return sandbox.Template{}, fmt.Errorf("template %s: layer %s is missing: %w", name, id, errdefs.ErrUnavailable)
			}
			part.Layers = append(part.Layers, s.layerPath(id))
		}
		t.Parts = append(t.Parts, part)
	}
	return t, nil
}

// readManifest loads and checks templates/<name>.json.
func (s *Store) readManifest(name string) (*manifest, error) {
	if apiv1.ValidTemplateName(name) != nil {
		return nil, s.notFound(name)
	}
	f, err := s.templates.Open(name + ".json")
	if errors.Is(err, os.ErrNotExist) {
		return nil, s.notFound(name)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("template %s: bad manifest: %w", name, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("template %s: bad manifest: %w", name, err)
	}
	if m.Name != name {
		return nil, fmt.Errorf("template %s: manifest names %q", name, m.Name)
	}
	return &m, nil
}

// check validates a manifest read from disk: parts have clean absolute targets, the first
// is "/", and layers are valid layer IDs.
func (m *manifest) check() error {
	if len(m.Parts) == 0 || m.Parts[0].Target != "/" {
		return errors.New(`the first part must have target "/"`)
	}
	if m.Base != "" && m.Base != HostTemplate {
		return fmt.Errorf("base %q: only %q can be a base", m.Base, HostTemplate)
	}
	for _, p := range m.Parts {
		if err := validPartTarget(p.Target); err != nil {
			return err
		}
		if len(p.Layers) == 0 && m.Base == "" {
			return fmt.Errorf("part %s has no layers", p.Target)
		}
		for _, id := range p.Layers {
			if err := validLayerID(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// notFound is the error for an unknown template: it names those that exist.
func (s *Store) notFound(name string) error {
	names := []string{HostTemplate}
	if list, err := s.manifestNames(); err == nil {
		names = append(names, list...)
	}
	return fmt.Errorf("template %q (available: %s): %w", name, strings.Join(names, ", "), errdefs.ErrNotFound)
}

// manifestNames lists the stored template names, sorted.
func (s *Store) manifestNames() ([]string, error) {
	entries, err := fs.ReadDir(s.templates.FS(), ".")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && e.Type().IsRegular() && apiv1.ValidTemplateName(n) == nil && n != HostTemplate {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// List returns the built-in host template followed by the stored ones, by name. Manifests
// that cannot be read are logged and skipped.
func (s *Store) List(ctx context.Context) ([]TemplateInfo, error) {
	out := []TemplateInfo{hostTemplateInfo()}
	names, err := s.manifestNames()
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		m, err := s.readManifest(n)
		if err != nil {
			s.log.Warn("skipping unreadable template", "name", n, "err", err)
			continue
		}
		out = append(out, m.info())
	}
	return out, nil
}

func (m *manifest) info() TemplateInfo {
	n := 0
	for _, p := range m.Parts {
		n += len(p.Layers)
	}
	return TemplateInfo{Name: m.Name, Source: m.Source, Created: m.Created, Layers: n, Labels: m.Labels, Cmd: m.Cmd, Entrypoint: m.Entrypoint}
}

// writeManifest stores m atomically (temporary file, fsync, rename) and returns its info.
// A manifest of the same name is replaced; the layers only it referenced are collected.
func (s *Store) writeManifest(m *manifest) (TemplateInfo, error) {
	if err := m.check(); err != nil {
		return TemplateInfo{}, err
	}
	old, _ := s.readManifest(m.Name)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return TemplateInfo{}, err
	}
	tmp := tmpPrefix + m.Name + "-" + randHex(4) + ".json"
	s.mark(tmp)
	defer s.unmark(tmp)
	f, err := s.templates.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return TemplateInfo{}, err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.templates.Rename(tmp, m.Name+".json")
	}
	if err != nil {
		_ = s.templates.Remove(tmp)
		return TemplateInfo{}, fmt.Errorf("writing template %s: %w", m.Name, err)
	}
	if old != nil {
		s.collectLayers(old.layerIDs())
	}
	return m.info(), nil
}

func (m *manifest) buildState() BuildState {
	st := BuildState{Base: m.Base, Env: m.Env, User: m.User, Workdir: m.Workdir, Labels: m.Labels, Cmd: m.Cmd, Entrypoint: m.Entrypoint}
	for _, p := range m.Parts {
		st.Parts = append(st.Parts, BuildPart(p))
	}
	return st
}

func (m *manifest) layerIDs() []string {
	var ids []string
	for _, p := range m.Parts {
		ids = append(ids, p.Layers...)
	}
	return ids
}

// DeleteTemplate removes a stored template; its layers go too unless another template
// still uses them or they are still mounted (then Cleanup removes them later). The
// built-in host template cannot be deleted (ErrInvalidArgument); an unknown name gives
// ErrNotFound.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	if name == HostTemplate {
		return fmt.Errorf("template %s is built in and cannot be deleted: %w", name, errdefs.ErrInvalidArgument)
	}
	m, err := s.readManifest(name)
	if err != nil {
		return err
	}
	if err := s.templates.Remove(name + ".json"); err != nil {
		return fmt.Errorf("deleting template %s: %w", name, err)
	}
	s.collectLayers(m.layerIDs())
	return nil
}

// referencedLayers returns the layer IDs some stored manifest refers to.
func (s *Store) referencedLayers() (map[string]bool, error) {
	names, err := s.manifestNames()
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	for _, n := range names {
		m, err := s.readManifest(n)
		if err != nil {
			// An unreadable manifest might still reference anything: keep everything.
			return nil, fmt.Errorf("reading template %s: %w", n, err)
		}
		for _, id := range m.layerIDs() {
			refs[id] = true
		}
	}
	return refs, nil
}

// collectLayers removes those of ids that no manifest references, that are not being
// built and that nothing has mounted. Failures are logged: a layer left behind is only
// disk space, and Cleanup tries again.
func (s *Store) collectLayers(ids []string) {
	refs, err := s.referencedLayers()
	if err != nil {
		s.log.Warn("not collecting layers", "err", err)
		return
	}
	for _, id := range ids {
		if refs[id] || s.isBuilding(id) || validLayerID(id) != nil {
			continue
		}
		if busy, err := linux.MountedFrom(s.layerPath(id)); err != nil || busy {
			s.log.Info("layer still in use; keeping it for now", "layer", id, "err", err)
			continue
		}
		if err := s.removeLayerDir(id); err != nil {
			s.log.Warn("removing layer", "layer", id, "err", err)
			continue
		}
		s.log.Info("removed unused layer", "layer", id)
	}
}

// Cleanup removes what a crash can leave behind: half-built layers and manifests and
// half-created drives, template layers (img-*, deb-*) no manifest refers to, and host
// layers made from an earlier state of the host's /etc; never a layer that is mounted. It
// leaves alone anything this process is building right now and repository layers (their
// users are sandboxes, which the store does not know). Call it at daemon start.
func (s *Store) Cleanup(ctx context.Context) error {
	var errs []error
	for _, sub := range []struct {
		root *os.Root
		what string
	}{{s.layers, "layers"}, {s.templates, "templates"}, {s.drives, "drives"}} {
		entries, err := fs.ReadDir(sub.root.FS(), ".")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			n := e.Name()
			if !strings.HasPrefix(n, tmpPrefix) || s.isBuilding(n) {
				continue
			}
			if sub.root == s.layers {
				err = s.removeLayerDir(n)
			} else {
				err = sub.root.RemoveAll(n)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing %s/%s: %w", sub.what, n, err))
				continue
			}
			s.log.Info("removed leftover of an interrupted operation", "path", filepath.Join(s.dir, sub.what, n))
		}
	}
	s.cleanupSnapshots()
	s.ThawAll()
	entries, err := fs.ReadDir(s.layers.FS(), ".")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	// Host layers of an earlier /etc are unused once unmounted: sandboxes resolve the host
	// template anew at each start.
	currentHost := ""
	if t, err := s.hostTemplate(); err == nil {
		currentHost = filepath.Base(t.Parts[0].Layers[0])
	} else {
		errs = append(errs, err)
	}
	var unused []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "img-") || strings.HasPrefix(n, "deb-") || strings.HasPrefix(n, "bld-") ||
			(currentHost != "" && strings.HasPrefix(n, "host-etc-") && n != currentHost) {
			unused = append(unused, n)
		}
	}
	if len(unused) > 0 {
		s.collectLayers(unused)
	}
	return errors.Join(errs...)
}

// validPartTarget accepts "/" and clean absolute paths of plain components.
func validPartTarget(t string) error {
	if t == "/" {
		return nil
	}
	if !strings.HasPrefix(t, "/") || filepath.Clean(t) != t || strings.ContainsAny(t, ",:\x00") {
		return fmt.Errorf("part target %q must be a clean absolute path: %w", t, errdefs.ErrInvalidArgument)
	}
	if slices.Contains(strings.Split(t[1:], "/"), "..") {
		return fmt.Errorf("part target %q: %w", t, errdefs.ErrInvalidArgument)
	}
	return nil
}
